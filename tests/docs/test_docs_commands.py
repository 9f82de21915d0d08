"""Every ``pybcache`` command quoted in README.md and docs/ names a real command and real options, and every
literal option value it shows is one the option accepts (issue 16: docs state only what runs).

Commands are taken from inline code spans and fenced blocks that start with ``pybcache`` (a synopsis may
continue on indented lines). Placeholders (``N``, ``SIZE``, ``...``) are not values; ``a|b`` lists alternatives,
each checked; ``[...]`` marks an option as optional, still checked.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from pybcache.commands import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PLACEHOLDER = re.compile(r"^(\.\.\.|[A-Z][A-Z0-9_.]*|[A-Z]|ARGS)$")


def quoted_commands(text: str) -> list[str]:
    found = [m.group(1) for m in re.finditer(r"`(pybcache [^`]+)`", text)]
    in_block = False
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            in_block = not in_block
            continue
        body = line.strip().removeprefix("$ ")
        if in_block and body.startswith("pybcache ") and "`" not in body:
            j = i + 1
            while j < len(lines) and lines[j].startswith(" ") and lines[j].strip().startswith(("[", "--")):
                body += " " + lines[j].strip()
                j += 1
            found.append(body)
    return found


def _subparsers():
    parser = build_parser()
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return action.choices


def _is_prose(command: str) -> bool:
    """A code span that starts with the package's name but is a sentence ("pybcache is a laboratory ..."),
    or an import line: not a command, so not a case."""
    words = command.split()
    name = words[1] if len(words) > 1 else ""
    return name in ("is", "was", "turns", "reports", "import") or not re.fullmatch(r"[a-z][a-z-|]*", name)


CASES = [(doc.relative_to(ROOT).as_posix(), cmd) for doc in DOCS for cmd in quoted_commands(doc.read_text())
         if not _is_prose(cmd)]


def test_prose_is_told_from_commands():
    assert _is_prose("pybcache is a laboratory") and _is_prose("pybcache import x")
    assert not _is_prose("pybcache race --sync page") and not _is_prose("pybcache race|explore|fio")


def test_the_docs_quote_commands_at_all():
    assert len(CASES) > 30 and {c.split()[1] for _, c in CASES} >= {"memory", "race", "explore", "fio", "report"}


@pytest.mark.parametrize("doc, command", CASES, ids=[f"{d}:{c[:50]}" for d, c in CASES])
def test_a_quoted_command_and_its_options_exist(doc, command):
    text = command.split("#", 1)[0].replace("\\|", "|")
    tokens = re.sub(r"[\[\]]", " ", text).split()
    name = tokens[1]
    if name == "race|explore|fio" or (len(tokens) > 2 and tokens[2] == "|"):
        names = [t for t in tokens[1:] if t != "|"]
        assert set(names) <= set(COMMANDS), f"{doc}: {command!r} names an unknown command"
        return
    assert name in COMMANDS, f"{doc}: {command!r}: no command {name!r}"
    parser = _subparsers()[name]
    options = {s: a for a in parser._actions for s in a.option_strings}
    for i, tok in enumerate(tokens[2:], start=2):
        if not tok.startswith("--"):
            continue
        opt, _, inline = tok.partition("=")
        assert opt in options, f"{doc}: {command!r}: {name} has no option {opt}"
        action = options[opt]
        value = inline or (tokens[i + 1] if i + 1 < len(tokens) and not tokens[i + 1].startswith("-") else "")
        if not value or action.nargs == 0:
            continue
        for alt in value.split("|"):
            if not alt or PLACEHOLDER.match(alt) or alt in ("|",):
                continue
            converted = alt
            if action.type is not None:
                try:
                    converted = action.type(alt)
                except SystemExit:
                    pytest.fail(f"{doc}: {command!r}: {opt} refuses {alt!r}")
                except (ValueError, TypeError) as exc:
                    pytest.fail(f"{doc}: {command!r}: {opt} refuses {alt!r}: {exc}")
            if action.choices is not None:
                assert converted in action.choices, f"{doc}: {command!r}: {opt} does not take {alt!r}"
