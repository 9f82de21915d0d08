"""``make mutate``'s helper (not a test module): prepare a scratch copy of the tree for mutmut 3 with the
modules asked for, and summarise the results per module.

mutmut 3 reads its configuration from ``pyproject.toml`` in the directory it runs in and copies the
``source_paths`` into ``mutants/`` there, then runs the tests against that copy. So that a module list can be
chosen per run (``make mutate MODULES=...``) without editing the project's ``pyproject.toml``, the run happens
in a scratch directory (``build/mutate``) holding a copy of ``pybcache/`` (with the extensions built in place:
the compiled ``.so`` files travel with the copy, so ``mutants/pybcache`` imports), ``tests/`` and a
``pyproject.toml`` (the project's, plus a ``[tool.mutmut]`` table) that names only the modules asked for and the
test files mapped to them in ``config.toml`` beside this file (mutation testing's configuration lives here, not
in the product's ``pyproject.toml``).

    python tools/mutate/mutate.py prepare DIR MODULE...   # prints the mutant-name globs to pass to mutmut run
    python tools/mutate/mutate.py summary DIR             # per-module kill rate, surviving mutants listed
"""
from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CONFIG = HERE / "config.toml"


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def _mapped_tests(mapping: dict, module: str) -> list[str]:
    """The tests mapped to ``module``: a list, or the name of another module whose list it shares (one
    level: the writeback package's modules share the model's)."""
    tests = mapping.get(module)
    if isinstance(tests, str):
        tests = mapping.get(tests)
        if not isinstance(tests, list):
            sys.exit(f"mutate: {module} names {mapping[module]!r} for its tests, which maps no list")
    return tests or []


def prepare(out: Path, modules: list[str]) -> None:
    plan = tomllib.loads(CONFIG.read_text("utf-8"))
    base = plan["mutmut"]
    tests: list[str] = []
    globs: list[str] = []
    for m in modules:
        if not (ROOT / m).is_file() or not m.endswith(".py"):
            sys.exit(f"mutate: MODULES: {m!r} is not a Python file of this tree")
        for t in _mapped_tests(plan["tests"], m) or sys.exit(f"mutate: no tests mapped to {m} in "
                                                             f"[tests] of {CONFIG.relative_to(ROOT)}"):
            if not (ROOT / t.split("::")[0]).exists():
                print(f"mutate: {t} (mapped to {m}) does not exist: left out", file=sys.stderr)
            elif t not in tests:
                tests.append(t)
        dotted = m[:-3].replace("/", ".")
        globs += plan.get("mutants", {}).get(m, [f"{dotted}.*"])
    if out.exists():
        shutil.rmtree(out)
    # mutants/ must exist when mutmut starts: it puts it on sys.path only if it exists then, and an import
    # before it exists would cache "no such directory" for PYTHONPATH too, so the original package would be
    # imported (and no test would reach a mutant).
    (out / "mutants").mkdir(parents=True)
    # The tests run the CLI as child processes from the temporary directory (tests/helpers/clirun.py), and a mutated
    # function there, in mutmut's "stats" pass, reads mutmut's configuration from its working directory:
    # TMPDIR (set by `make mutate`) is this directory, which gives it one.
    (out / "tmp").mkdir()
    (out / "tmp" / "pyproject.toml").write_text('[tool.mutmut]\nsource_paths = ["pybcache"]\n', "utf-8")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "_*.c")
    shutil.copytree(ROOT / "pybcache", out / "pybcache", ignore=ignore)
    shutil.copytree(ROOT / "tests", out / "tests", ignore=ignore)
    shutil.copytree(ROOT / "csrc", out / "csrc", ignore=ignore)   # C the package reads at import (_shipped)
    shutil.copytree(ROOT / "examples", out / "examples", ignore=ignore)   # grids and patches the tests read
    shutil.copytree(ROOT / "docs", out / "docs", ignore=ignore)   # synopses the CLI tests check against the parser
    shutil.copy2(ROOT / "README.md", out / "README.md")
    text = (ROOT / "pyproject.toml").read_text("utf-8")
    assert "\n[tool.mutmut]" not in text, f"pyproject.toml has its own [tool.mutmut]: the configuration is {CONFIG}"
    lines = [f"{k} = {json.dumps(v) if not isinstance(v, list) else _toml_list(v)}" for k, v in base.items()
             if k not in ("only_mutate", "pytest_add_cli_args_test_selection")]
    lines += [f"only_mutate = {_toml_list(modules)}", f"pytest_add_cli_args_test_selection = {_toml_list(tests)}"]
    (out / "pyproject.toml").write_text(text.rstrip("\n") + "\n\n[tool.mutmut]\n" + "\n".join(lines) + "\n", "utf-8")
    print(" ".join(globs))


def summary(out: Path) -> int:
    from mutmut.stats import status_by_exit_code
    rows = []
    survivors = []
    for meta in sorted((out / "mutants").rglob("*.py.meta")):
        data = json.loads(meta.read_text("utf-8"))
        module = str(meta.relative_to(out / "mutants"))[: -len(".meta")]
        counts: dict[str, int] = {}
        for key, code in data.get("exit_code_by_key", {}).items():
            status = status_by_exit_code[code]
            counts[status] = counts.get(status, 0) + 1
            if status not in ("killed", "timeout", "segfault", "caught by type check", "not checked", "skipped"):
                survivors.append((module, key, status))
        tested = sum(v for k, v in counts.items() if k not in ("not checked", "skipped"))
        if not tested:
            continue
        killed = sum(counts.get(k, 0) for k in ("killed", "timeout", "segfault", "caught by type check"))
        rows.append((module, tested, killed, counts))
    print(f"{'module':32} {'mutants':>7} {'killed':>6} {'rate':>6}  other")
    for module, tested, killed, counts in rows:
        other = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if k not in ("killed",))
        print(f"{module:32} {tested:7d} {killed:6d} {100 * killed / tested:5.1f}%  {other}")
    for module, key, status in survivors:
        print(f"  {status:10} {key}")
    return 0


if __name__ == "__main__":
    cmd, where, *rest = sys.argv[1:]
    if cmd == "prepare":
        prepare(Path(where), [m for arg in rest for m in re.split(r"[\s,]+", arg) if m])
    elif cmd == "summary":
        sys.exit(summary(Path(where)))
    else:
        sys.exit(f"mutate: unknown command {cmd!r}")
