"""The command line's shared helpers (pybcache/commands/_util.py) on inputs whose results are known: sizes, number
arguments, choice lists, JSON output, the progress wrapper and the text formats."""
from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from pybcache import _console as console, units
from pybcache.commands import _sync as sync, _util as cu


@pytest.mark.parametrize("text, n", [
    ("512", 512), ("4K", 4096), ("4k", 4096), ("32M", 32 << 20), ("10G", 10 << 30), ("1T", 1 << 40),
    ("2P", 2 << 50), (" 8 KiB ", 8192), ("8KB", 8192), ("8 b", 8), ("9" * 30, int("9" * 30)), ("1", 1),
])
def test_parse_size_reads_binary_units(text, n):
    assert cu.parse_size(text) == n


@pytest.mark.parametrize("text, message", [
    ("", "size: '' is not a size (use e.g. 512, 4K, 32M, 10G, 1T)"),
    ("1.5T", "size: '1.5T' is not a size (use e.g. 512, 4K, 32M, 10G, 1T)"),
    ("-1K", "size: '-1K' is not a size (use e.g. 512, 4K, 32M, 10G, 1T)"),
    ("1X", "size: '1X' is not a size (use e.g. 512, 4K, 32M, 10G, 1T)"),
    ("9" * 31, f"size: {'9' * 31!r} is not a size (use e.g. 512, 4K, 32M, 10G, 1T)"),
    ("0", "size: size must be > 0, got '0'"),
    ("0T", "size: size must be > 0, got '0T'"),
])
def test_parse_size_refuses_naming_the_argument(text, message):
    with pytest.raises(cu.UsageError) as info:
        cu.parse_size(text)
    assert str(info.value) == message
    with pytest.raises(cu.UsageError, match="^--len: "):
        cu.parse_size(text, name="--len")


def test_parse_size_list_skips_empty_items_and_names_the_argument():
    assert cu.parse_size_list("1T, 10T,,100T,") == [1 << 40, 10 << 40, 100 << 40]
    with pytest.raises(cu.UsageError) as info:
        cu.parse_size_list(" , ")
    assert str(info.value) == "sizes: expected a comma-separated list of sizes, got ' , '"
    with pytest.raises(cu.UsageError, match=r"^--sizes: '2X' is not a size"):
        cu.parse_size_list("1T,2X", name="--sizes")


def test_parse_choice_list_keeps_the_order_and_names_what_is_allowed():
    assert cu.parse_choice_list(" page, none ,", ("none", "page"), name="v") == ["page", "none"]
    with pytest.raises(cu.UsageError) as info:
        cu.parse_choice_list(",", ("none", "page"), name="v")
    assert str(info.value) == "v: expected a comma-separated list from none, page"
    with pytest.raises(cu.UsageError) as info:
        cu.parse_choice_list("none,PAGE", ("none", "page"), name="v")
    assert str(info.value) == "v: unknown value 'PAGE' (allowed: none, page)"


def test_int_arg_takes_decimal_integers_in_the_closed_range():
    parse = cu.int_arg(1, 10)
    assert [parse("1"), parse(" 10 "), parse("07")] == [1, 10, 7]
    for text, message in (("0", "must be in [1, 10], got 0"), ("11", "must be in [1, 10], got 11"),
                          ("1.5", "expected an integer in [1, 10], got '1.5'"),
                          ("0x5", "expected an integer in [1, 10], got '0x5'"),
                          ("", "expected an integer in [1, 10], got ''")):
        with pytest.raises(argparse.ArgumentTypeError) as info:
            parse(text)
        assert str(info.value) == message


def test_float_arg_takes_numbers_in_the_range_open_or_closed_at_the_low_end():
    closed, half_open = cu.float_arg(0.0, 1.0), cu.float_arg(0.0, 1.0, open_low=True)
    assert [closed("0"), closed("1"), half_open("1e-9"), half_open("1.0")] == [0.0, 1.0, 1e-9, 1.0]
    for parse, text, message in ((closed, "-0.1", "must be in [0.0, 1.0], got -0.1"),
                                 (closed, "1.5", "must be in [0.0, 1.0], got 1.5"),
                                 (half_open, "0", "must be in (0.0, 1.0], got 0"),
                                 (half_open, "2", "must be in (0.0, 1.0], got 2"),
                                 (closed, "nan", "must be in [0.0, 1.0], got nan"),
                                 (closed, "x", "expected a number, got 'x'")):
        with pytest.raises(argparse.ArgumentTypeError) as info:
            parse(text)
        assert str(info.value) == message


def test_tracking_arguments_have_the_documented_choices_and_defaults():
    p = argparse.ArgumentParser()
    sync.add_tracking_arguments(p, ("none", "page"))
    # --alloc-failure is None when not given (a command can then refuse it with a patch); the default is mempool
    assert vars(p.parse_args([])) == {"sync": "page", "check": "after", "alloc_failure": None, "unhijack": None}
    got = p.parse_args(["--sync", "none", "--check", "before", "--alloc-failure", "pool"])
    assert (got.sync, got.check, got.alloc_failure) == ("none", "before", "pool")
    for opt, allowed in (("--check", ["entry", "miss", "after", "read-done", "before"]),
                         ("--alloc-failure", ["untracked", "hijack", "pool", "mempool"])):
        action = next(a for a in p._actions if opt in a.option_strings)
        assert list(action.choices) == allowed
    # --sync takes a variant or a patch's .c file (pybcache/commands/_sync.py): anything else is refused
    with pytest.raises(SystemExit):
        p.parse_args(["--sync", "global"])
    helps = {a.dest: a.help for a in p._actions}
    # each help states the default
    assert helps["sync"] == ("tracking variant (none, page; none = unpatched), or a kernel patch's .c file, which "
                             "is compiled and loaded (default page)")
    assert helps["check"] == ("where a read consults the tracker: at request entry, in the miss path before the "
                              "check key, after the check key, or after the backing read (read-done) "
                              "(default after; before = entry, its old name)")
    assert helps["alloc_failure"] == ("tracker policy on page-allocation failure (default mempool, with a one-page "
                                      "reserve)")
    assert "--sync VARIANT|PATCH.c" in p.format_help()     # the usage says a patch file is taken too


def test_emit_json_prints_indented_json_with_numpy_values(capsys):
    cu.emit_json({"b": np.int64(2), "a": np.arange(2), "c": np.float32(0.5)})
    out = capsys.readouterr().out
    assert out == '{\n  "b": 2,\n  "a": [\n    0,\n    1\n  ],\n  "c": 0.5\n}\n'
    with pytest.raises(TypeError, match="^not JSON serialisable: object$"):
        cu.emit_json({"x": object()})
    assert json.loads(out) == {"b": 2, "a": [0, 1], "c": 0.5}


def test_progress_yields_every_item_and_advances_its_bar_once_per_item(monkeypatch):
    seen = []

    class Bar:
        def __init__(self, **kw):
            seen.append(("init", kw["total"], kw["desc"], kw["disable"], kw["leave"], kw["bar_format"]))

        def update(self, n):
            seen.append(("update", n))

        def close(self):
            seen.append(("close",))

    import tqdm
    monkeypatch.setattr(tqdm, "tqdm", Bar)
    assert list(console.progress(iter("ab"), total=2, desc="d", quiet=True)) == ["a", "b"]
    assert seen == [("init", 2, "d", True, False, None), ("update", 1), ("update", 1), ("close",)]
    seen.clear()
    with pytest.raises(KeyError):
        with console.status_bar("s") as bar:
            bar.update(3)
            raise KeyError
    assert seen[0][1:3] == (None, "s") and seen[0][5] == "{desc}: {elapsed}{postfix}" and seen[-1] == ("close",)
    # on a terminal the bar shows unless quiet (--json): quiet defaults to False
    seen.clear()
    import sys
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert list(console.progress(iter("a"))) == ["a"] and seen[0][3] is False
    assert seen[0][1:3] == (None, "")   # no total and no description unless given
    assert list(console.progress(iter("a"), quiet=True)) == ["a"] and seen[-3][3] is True


@pytest.mark.parametrize("n, text", [
    (0, "0 B"), (256, "256 B"), (1023, "1023 B"), (1024, "1 KiB"), (65792, "64.25 KiB"), (2570 << 10, "2.51 MiB"),
    (100.5, "100 B"), (1.5 * (1 << 30), "1.5 GiB"), (1 << 40, "1 TiB"), (3 << 50, "3072 TiB"),
    (1024 * 1024 - 1, "1024 KiB"),
])
def test_format_bytes_in_the_posted_tables_style(n, text):
    assert units.format_bytes(n) == text


def test_format_table_aligns_the_first_column_left_and_the_others_right():
    assert console.format_table(["name", "n"], [["a", 1], ["long", 100]]) == (
        "name    n\n----  ---\na       1\nlong  100")
    assert console.format_table(["a", "b"], [["", 5]]) == "a  b\n-  -\n   5"   # an empty first cell keeps its column
    assert console.format_table(["x", "y"], [["", ""]]) == "x  y\n-  -\n"   # an empty row: trailing blanks stripped
