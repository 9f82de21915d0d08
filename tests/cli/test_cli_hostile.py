"""Every CLI command with hostile arguments (issue 7): exit status 2, exactly one line on stderr, nothing on
stdout, no traceback, and nothing run. Every input below is invalid, so each invocation ends at argument
parsing; the whole matrix runs in-process through ``pybcache.commands.main`` (an uncaught exception there is
what a traceback would be), and one input per command also runs as a real ``python -m pybcache`` process.
"""
from __future__ import annotations

import os
import re

import pytest

from helpers.clirun import run_pybcache

from pybcache.commands import main

pytestmark = pytest.mark.e2e

BIG = str(2**70)
HUGE_DIGITS = "9" * 5000          # past CPython's int-from-string digit limit
NAN_INF = ["nan", "inf", "-inf", "NaN", "1e999"]


def _with(option: str, values: list[str]) -> list[list[str]]:
    return [[option, v] for v in values] + [[option]]   # the last one: the value is missing


COMMON = [["--no-such-option"], ["--no-such-option", "1"], ["stray-positional"], ["--json=yes"], ["-x"],
          ["--bogus\nsecond line"], ["--\u00e9\u00e8"], ["\x1b[31mred"]]

def _grids() -> dict[str, str]:
    """Grid files for `sweep`, one per kind of bad content, plus a valid one (for bad options)."""
    import tempfile
    d = tempfile.mkdtemp(prefix="pybcache-hostile-")
    texts = {"ok": '[explore]\nbounds = ["1w1r"]\n', "toml": "[race\n", "table": '[racer]\nsync = ["page"]\n',
             "key": '[race]\nsyncc = ["page"]\n', "value": '[race]\nsync = ["pagee"]\n',
             "range": '[race]\nthreads = [1]\n', "empty": "", "nolist": '[race]\nsync = []\n',
             "switch": '[explore]\nno_reduce = ["yes"]\n', "json": '[race]\njson = [true]\n',
             "stress": '[stress]\nthreads = [0]\n', "nested": '[race]\nsync = [["page"]]\n'}
    paths = {}
    for name, text in texts.items():
        paths[name] = os.path.join(d, name + ".toml")
        with open(paths[name], "w") as f:
            f.write(text)
    paths["binary"] = os.path.join(d, "binary.toml")
    with open(paths["binary"], "wb") as f:
        f.write(b"\xff\xfe[race]\n")
    paths["missing"] = os.path.join(d, "missing.toml")
    paths["dir"] = d
    return paths


GRIDS = _grids()

HOSTILE: dict[str, list[list[str]]] = {
    "memory": COMMON + _with("--sizes", ["", "0", "-1T", "1X", "1.5T", "abc", ",", " , ", "1T,-5", "2P", "1T,2P",
                                         "99999999999999999999999P", HUGE_DIGITS, "0x10", "1e3", "nan", "inf",
                                         "1T\nX", "4K;rm -rf /"]),
    "bench": COMMON + [["--quick=1"], ["--quick", "extra"], ["--iterations", "5"]],
    "race": COMMON
    + _with("--threads", ["0", "1", "-1", "257", "abc", "", "2.5", "1e3", BIG, HUGE_DIGITS])
    + _with("--writers", ["0", "-1", "256", "x", BIG])
    + [["--threads", "2", "--writers", "2"], ["--threads", "4", "--writers", "4"]]
    + _with("--seconds", ["0", "-1", "3601", "", "abc"] + NAN_INF)
    + _with("--fault-probability", ["-0.1", "1.5", "x"] + NAN_INF)
    + _with("--min-ops", ["-1", str(10**13), "1.5", BIG])
    + _with("--seed", ["-1", str(2**63), "x", HUGE_DIGITS])
    + _with("--write-delay-us", ["-1", "1e7", "x"] + NAN_INF)
    + _with("--region-blocks", ["0", "-4", str(2**21), "x"])
    + _with("--chunk-size", ["0", "100", "3K", "-4K", "abc", "", "8192P", HUGE_DIGITS])
    + _with("--reclaim-every", ["-1", str(2**41), "x"])
    + _with("--sync", ["bogus", "", "Page", "none,page"])
    + _with("--check", ["sometimes", ""]) + _with("--alloc-failure", ["retry", ""])
    + _with("--invalidate", ["later", "", "AT-SUBMIT", "after_write"]),
    "explore": COMMON
    + _with("--bounds", ["", "3x", "9w0r", "0w0r", "-1w1r", "1w1r,x", "1w", "w1r", "5w5r", HUGE_DIGITS + "w1r"])
    + _with("--fault-at", ["-1", "abc", str(2**63), "1.5", ""])
    + _with("--max-schedules", ["-1", "1.5", "1e3", BIG])
    + _with("--sync", ["x"]) + _with("--check", ["x"]) + _with("--alloc-failure", ["x"])
    + _with("--scenario", ["", "4w4r", "2W2R", "2w2r,1w1r"])
    + _with("--invalidate", ["later", "", "after-writes"])
    + [["--workers", "2"], ["--scheduler", "tcp://127.0.0.1:1"], ["--distributed", "--max-schedules", "5"],
       ["--distributed", "--scheduler", "bogus"], ["--distributed", "--scheduler", "tcp://127.0.0.1:1",
                                                   "--workers", "2"], ["--distributed=1"]]
    + [["--distributed"] + a for a in _with("--workers", ["0", "257", "x"])]
    + [["--distributed"] + a for a in _with("--tasks-per-worker", ["0", "1025", "x"])],
    "fio": COMMON
    + _with("--size", ["0", "-1", "1X", "2T", "127K", "", "abc", HUGE_DIGITS])
    + _with("--jobs", ["0", "257", "-1", "x", BIG])
    + _with("--seconds", ["0", "-1", "3601", "x"] + NAN_INF)
    + _with("--variants", ["", "bogus", "none,none", ",", "page,PAGE"])
    + _with("--read-percent", ["-1", "101", "50.5"])
    + _with("--inflight", ["0", "-1", str(2**21)]) + [["--jobs", "4", "--inflight", "2"]]
    + _with("--chunk-size", ["0", "1000", "3M", "x"])
    + _with("--seed", ["-1", "x"])
    + _with("--engine", ["", "qemu", "NBD"])
    + [["--engine", "nbd", "--write-delay", v] for v in ["", "x", "-1ms", "11s", "5min"] + NAN_INF]
    + [["--engine", "nbd", "--size", v] for v in ["100K", "2T", "0"]]
    + [["--engine", "nbd", "--variants", v] for v in ["", "none,none", "spin"]]
    + [["--engine", "nbd", "--memory-baseline=1"]],
    "serve": COMMON
    + _with("--size", ["0", "-1", "1X", "2T", "1000", "", "abc", HUGE_DIGITS])
    + _with("--write-delay", ["", "x", "-1ms", "11s", "1e3ms", HUGE_DIGITS] + NAN_INF)
    + _with("--sync", ["", "bogus", "Page", "none,page", "mine.c"])
    + _with("--port", ["0", "-1", "65536", "x", "", BIG])
    + _with("--threads", ["0", "1025", "x", ""])
    + _with("--socket", []) + _with("--json-stats", [])
    + [["--socket", "/tmp/x.sock", "--port", "10809"]],
    "writeback": COMMON
    + _with("--runs", ["0", "-1", "1001", "abc", "", "1.5", BIG, HUGE_DIGITS])
    + _with("--seed", ["-1", str(2**48), "x", "nan"])
    + [["--churn=yes"], ["--churn", "extra"]],
    "sweep": [[GRIDS["ok"]] + a for a in COMMON] + [[]]
    + [[GRIDS[k], "--workers", "0"] for k in ("toml", "table", "key", "value", "range", "empty", "nolist",
                                              "switch", "json", "stress", "nested", "binary", "missing", "dir")]
    + [[GRIDS["ok"]] + a for a in _with("--reps", ["0", "-1", "10001", "x", "1.5", BIG, HUGE_DIGITS])]
    + [[GRIDS["ok"]] + a for a in _with("--workers", ["-1", "257", "x", BIG])]
    + [[GRIDS["ok"]] + a for a in _with("--scheduler", ["", "bogus", "http://x:1", "tcp://", "tcp://a b:1"])]
    + [[GRIDS["ok"], "--scheduler", "tcp://127.0.0.1:1", "--workers", "2"]]
    + [[GRIDS["ok"]] + a for a in _with("--out", ["/dev/null", "/dev/null/sub"])],
    "report": COMMON + _with("--out", ["", "/dev/null", "/dev/null/sub", "x" * 300]) + [["--quick=1"]],
    "check-patch": COMMON + [[], ["/nonexistent.c"], ["/"], [""], ["/nonexistent.c", "--tsan=1"]]
    + [["/nonexistent.c"] + a for a in _with("--seconds", ["0", "-1", "601", "x", ""] + NAN_INF)],
    "kernel": [["race"] + a for a in COMMON if a[0].startswith("--")]
    + [["race"] + a for a in _with("--tries", ["0", "-1", "1001", "x", "", "2.5", BIG, HUGE_DIGITS])]
    + [["race"] + a for a in _with("--write-delay", ["-1", "11s", "x", "", "1.5ms"])]
    + [["race"] + a for a in _with("--fail-alloc", ["", "1abc", "4K;rm -rf /"])]
    + [["build"] + a for a in _with("--jobs", ["0", "65", "x"])]
    + [["stress"] + a for a in _with("--seconds", ["0", "601", "x"]) + _with("--writers", ["0", "17"])]
    + [["build", "--tries", "3"], ["diff", "--tries", "2"], ["race", "--seconds", "5"], ["build", "--keep"],
       ["race", "--patch", "/nonexistent.diff"], ["race", "--patch", "gen:nosuch"],
       ["race", "--no-debug", "--fail-alloc", "kmalloc"], ["diff", "v1", "--patch", "x.diff"]],
}
# (a bare `pybcache` prints the usage and the command list instead: tests/test_cli_basics.py)
HOSTILE[""] = [["nosuchcommand"], ["--json"], [""], ["-h\n"], ["memory\nrace"], ["MEMORY"]]

CASES = [(cmd, args) for cmd, lists in HOSTILE.items() for args in lists]


# Hostile values that cannot stand in a test id as they are, by what they are.
_NAMED = {"": "empty", ",": "comma", " , ": "space-comma-space", "/": "root-dir", BIG: "2pow70",
          HUGE_DIGITS: "5000-digits", HUGE_DIGITS + "w1r": "5000-digits-w1r", "x" * 300: "300-chars",
          "--bogus\nsecond line": "--bogus-newline-second-line", "--\u00e9\u00e8": "--non-ascii",
          "\x1b[31mred": "ansi-escape", "1T\nX": "1T-newline-X", "4K;rm -rf /": "4K-semicolon-shell-command",
          "tcp://a b:1": "tcp-host-with-space", "-h\n": "-h-newline", "memory\nrace": "memory-newline-race"}
_PLAIN = re.compile(r"[A-Za-z0-9_.+:/-]+")


def _id(case: tuple[str, list[str]]) -> str:
    """The case as a test id that says what it is and that pytest gives back unchanged in every collection
    and process (mutmut selects tests again by node id): only letters, digits and ``_.+:/-`` (no backslash,
    which pytest escapes once more at each collection in one process; nothing ``-k`` cannot take), the
    arguments joined by ``_``, hostile values by name, the grids' temporary files as ``grid-NAME``."""
    cmd, args = case
    words = []
    for a in ([cmd] if cmd else []) + args:
        if a in _NAMED:
            a = _NAMED[a]
        elif a.startswith(GRIDS["dir"]):
            a = "grid-" + (os.path.basename(a)[: -len(".toml")] if a != GRIDS["dir"] else "dir")
        words.append(a.replace("=", "-eq-").replace(",", "-comma-"))
    return "_".join(words)


@pytest.mark.parametrize("cmd, args", CASES, ids=[_id(c) for c in CASES])
def test_hostile_arguments_exit_2_with_one_line_on_stderr(capsys, cmd, args):
    argv = ([cmd] if cmd else []) + args
    try:
        status = main(argv)
    except SystemExit as exc:
        status = exc.code
    out, err = capsys.readouterr()
    assert status == 2, f"exit status {status!r} for {argv!r}; stderr: {err!r}"
    assert out == "", f"stdout for {argv!r}: {out!r}"
    assert len(err.splitlines()) == 1 and err.endswith("\n"), f"stderr for {argv!r}: {err!r}"
    assert "Traceback" not in err and err.startswith("pybcache"), err
    if cmd:  # refused by the command itself, for the argument, not because the command is missing
        assert f"invalid choice: {cmd!r}" not in err and "argument COMMAND" not in err, err
    assert _names_an_argument(err, cmd, args), f"the error names none of {argv!r}: {err!r}"


def _names_an_argument(err: str, cmd: str, args: list[str]) -> bool:
    """Whether the one error line names what it refuses: an option given (as ``--foo-bar`` or as the Python
    name ``foo_bar`` the library's own check uses), an argument argparse did not recognise, the command
    argument of a bare ``pybcache``, for ``sweep`` the grid (its path, ``GRID``/``grid`` or the
    ``[table]`` whose content is refused), for ``check-patch`` the patch file."""
    low = err.lower()
    if "unrecognized arguments: " in err or "ignored explicit argument" in err:
        return True
    names = set()
    for a in args:
        if a.startswith("--"):
            opt = a.split("=")[0]
            names |= {opt, opt[2:].replace("-", "_")}
    if not cmd:
        names.add("argument command")
    if cmd == "sweep":
        names |= {"grid", "grid.toml"} | {f"[{t}] " for t in ("race", "stress", "fio", "explore", "writeback")}
        names |= {a for a in args if a.endswith(".toml") or a.startswith("/")}
    if cmd == "check-patch":       # the patch file: its metavar when missing, ``path:`` when unreadable
        names |= {"file.c", "path: "}
    return any(n.lower() in low for n in names)


def test_the_matrix_covers_every_command_and_nothing_else():
    from pybcache.commands import COMMANDS
    assert set(COMMANDS) == set(HOSTILE) - {""}
    assert len(CASES) > 250


def test_the_case_ids_are_plain_unique_and_short():
    # mutmut records each test's node id in one pytest session and selects it again in another in the same
    # process; an id pytest would escape (a backslash, a newline, a non-ASCII letter) came back different.
    ids = [_id(c) for c in CASES] + [_id(("", a)) for a in REAL]
    assert all(_PLAIN.fullmatch(i) and "::" not in i and len(i) <= 80 for i in ids), \
        [i for i in ids if not _PLAIN.fullmatch(i) or "::" in i or len(i) > 80]
    assert len(set(_id(c) for c in CASES)) == len(CASES)
    assert len(set(_id(("", a)) for a in REAL)) == len(REAL)


def test_every_command_of_the_matrix_is_registered_with_the_installed_cli():
    # An exit 2 is only a refusal of the argument if the command exists: the installed `pybcache --help`
    # lists each one.
    p = run_pybcache("--help", timeout=60)
    assert p.returncode == 0, p.stderr
    listed = {line.split()[0] for line in p.stdout.splitlines() if line.startswith("    ") and line.split()}
    for cmd in HOSTILE:
        if cmd:
            assert cmd in listed, f"`pybcache --help` does not list {cmd!r}: {sorted(listed)}"

@pytest.mark.parametrize("cmd", [c for c in HOSTILE if c])
def test_every_command_of_the_matrix_answers_its_own_help(capsys, cmd):
    with pytest.raises(SystemExit) as exc:
        main([cmd, "--help"])
    out, err = capsys.readouterr()
    assert exc.value.code == 0 and out.startswith(f"usage: pybcache {cmd}"), err


REAL = [["memory", "--sizes", "-1T"], ["bench", "--quick=1"], ["race", "--seconds", "nan"],
        ["explore", "--bounds", "9w0r"], ["fio", "--size", HUGE_DIGITS], ["writeback", "--runs", "0"],
        ["report", "--out", "/dev/null"], ["race", "--bogus\nsecond line"],
        ["sweep", GRIDS["key"], "--workers", "0"]]


@pytest.mark.parametrize("argv", REAL, ids=[_id(("", a)) for a in REAL])
def test_real_processes_exit_2_with_one_line_and_no_traceback(argv):
    p = run_pybcache(*argv, timeout=60)
    assert p.returncode == 2, p.stderr
    assert p.stdout == "" and len(p.stderr.splitlines()) == 1 and "Traceback" not in p.stderr, p.stderr
