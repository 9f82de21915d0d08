"""Stand-ins shared by the command tests (tests/cli/test_*_command.py): a parser with one command registered, its
parsed arguments, a ``--sync fix.c`` patch, a progress bar that records what it was handed."""
from __future__ import annotations

from types import SimpleNamespace

from pybcache import commands


def _parser(command):
    """The ``pybcache`` parser with only ``command`` registered (what build_parser gives it, without building the
    nine others: the whole parser takes ~10 ms)."""
    import importlib
    parser = commands._Parser(prog="pybcache")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=commands._Parser)
    importlib.import_module(f"pybcache.commands.{commands.COMMANDS[command]}").add_parser(sub)
    return parser


def _args(command, *argv):
    return _parser(command).parse_args([command, *argv])


def _patch(monkeypatch, module):
    """``--sync fix.c`` stood in for: the command's ``load_sync`` returns a patch object for it."""
    patch = SimpleNamespace(name="v3", path="/p/fix.c")
    monkeypatch.setattr(module, "load_sync", lambda value, syncs: patch if value == "fix.c" else value)
    return patch


def _recording_progress(monkeypatch, module):
    seen = []

    def progress(items, *, total=None, desc="", quiet=False):
        seen.append((list(items), total, desc, quiet))
        return iter(())
    monkeypatch.setattr(module, "progress", progress)
    return seen


def _without_progress(kw):
    return {k: v for k, v in kw.items() if k != "progress"}
