"""Parameter sweeps: a TOML grid of lab runs, one Dask task per point and repetition.

A grid file has one table per command (``race``, ``fio``, ``explore``, ``writeback``: their CLI long
option names with ``-`` written ``_``; ``stress``: the tracker's and :func:`pybcache.stress`'s keyword
arguments), each key a list of values; the grid of a table is the product of its lists::

    [race]
    sync = ["none", "page"]
    fault_probability = [0.0, 0.3]
    seconds = [0.5]

Every point is validated with the command's own parser before anything runs, so a key or value the
command does not take is a :class:`ValueError` naming it. Each (point, repetition) is one task with its
own seed, derived from the point and the repetition (or ``seed + rep`` when the grid fixes ``seed``);
commands without randomness (``explore``) record no seed. A task runs the command in the worker
process, through the C models directly, and sends back one small record: the figures (the numbers of
the command's ``--json`` output, flattened to ``name`` / ``variant.name``), wall time and the worker.

Results are cached under ``out/cache/`` by the SHA-256 of (command, parameters, repetition, seed,
package version), so an interrupted sweep resumes where it stopped and a repeated one runs nothing. A
task that Dask reruns (its worker died) produces the same key, so a row is never lost or doubled.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import importlib
import io
import itertools
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from .. import __version__
from ..units import parse_size
from ..validate import check_int, check_number

__all__ = [
    "GridError",
    "INTERVAL_METHOD",
    "SWEEP_COMMANDS",
    "expand_grid",
    "load_grid",
    "parse_grid",
    "run_task",
    "summarize",
    "sweep",
]

#: Commands a grid may hold, in the order their tables are run.
class GridError(ValueError):
    """A grid file, table, key or value that the sweep does not take (the command line exits 2 with it)."""


SWEEP_COMMANDS = ("race", "stress", "fio", "explore", "writeback")
_CLI_COMMANDS = ("race", "fio", "explore", "writeback")
_REFUSED_KEYS = {"json": "the sweep always reads --json", "help": "not an option", "func": "not an option",
                 "command": "not an option"}
MAX_POINTS = 100_000
MAX_REPS = 10_000
_SEED_MASK = (1 << 62) - 1

# stress: keys for the tracker it drives and for the stress itself
_STRESS_TRACKER_KEYS = ("device_size", "chunk_size", "sync", "counter_bits", "overflow", "alloc_failure",
                        "pool_pages", "free", "fault_probability")
_STRESS_RUN_KEYS = ("threads", "ops", "seconds", "write_length", "depth", "partition", "reclaim_every")
_STRESS_SIZE_KEYS = ("device_size", "chunk_size", "write_length")


def _interval_method() -> str:
    try:
        import scipy.stats  # noqa: F401
    except ImportError:
        return "normal"
    return "t"


#: How the 95 % interval over repetitions is computed: ``"t"`` (Student's t, scipy present) or
#: ``"normal"`` (mean +- 1.96 standard errors, the approximation used without scipy).
INTERVAL_METHOD = _interval_method()


# -- the grid -------------------------------------------------------------------------------------------

class _GridParser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so a grid's bad value is a ValueError."""

    def error(self, message: str) -> Any:
        raise GridError(message)


def _command_parser(command: str) -> argparse.ArgumentParser:
    root = _GridParser(prog="pybcache")
    sub = root.add_subparsers(dest="command", parser_class=_GridParser)
    importlib.import_module(f"pybcache.commands.{command}").add_parser(sub)
    return sub.choices[command]


def _option_action(parser: argparse.ArgumentParser, key: str) -> argparse.Action | None:
    flag = "--" + key.replace("_", "-")
    for action in parser._actions:
        if flag in action.option_strings:
            return action
    return None


def _argv(command: str, params: Mapping[str, Any]) -> list[str]:
    """The command line of one point, checked against the command's own parser."""
    parser = _command_parser(command)
    argv: list[str] = []
    for key, value in params.items():
        where = f"[{command}] {key}"
        if key in _REFUSED_KEYS:
            raise GridError(f"{where}: not allowed in a grid ({_REFUSED_KEYS[key]})")
        action = _option_action(parser, key)
        if action is None:
            raise GridError(f"{where}: `pybcache {command}` has no option --{key.replace('_', '-')}")
        flag = "--" + key.replace("_", "-")
        if action.nargs == 0:  # a switch
            if not isinstance(value, bool):
                raise GridError(f"{where}: a switch takes true or false, got {value!r}")
            if value:
                argv.append(flag)
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise GridError(f"{where}: expected a string or a number, got {value!r}")
        argv.append(f"{flag}={value}")
    try:
        _command_parser(command).parse_args(argv + ["--json"])
    except GridError as exc:
        raise GridError(f"[{command}] {exc}") from None
    return argv


def _stress_kwargs(params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a stress point into tracker and stress keyword arguments (sizes may be ``"32M"``)."""
    tracker: dict[str, Any] = {}
    run: dict[str, Any] = {}
    for key, value in params.items():
        where = f"[stress] {key}"
        if key == "seed":
            continue
        if key not in _STRESS_TRACKER_KEYS and key not in _STRESS_RUN_KEYS:
            raise GridError(f"{where}: not a stress key (allowed: "
                             f"{', '.join(_STRESS_TRACKER_KEYS + _STRESS_RUN_KEYS + ('seed',))})")
        if key in _STRESS_SIZE_KEYS and isinstance(value, str):
            try:
                value = parse_size(value, name=where)
            except ValueError as exc:
                raise GridError(str(exc)) from None
        (tracker if key in _STRESS_TRACKER_KEYS else run)[key] = value
    return tracker, run


def _build_stress_tracker(tracker_kw: Mapping[str, Any], seed: int) -> Any:
    from .. import BypassWriteTracker, FaultInjection, TiB

    kw = dict(tracker_kw)
    size = kw.pop("device_size", TiB)
    p = check_number(kw.pop("fault_probability", 0.0), "fault_probability", 0, 1)
    fault = FaultInjection(probability=p, seed=seed) if p else None
    return BypassWriteTracker(size, fault=fault, **kw)


def _check_stress(params: Mapping[str, Any]) -> None:
    tracker_kw, run_kw = _stress_kwargs(params)
    if "ops" in run_kw and "seconds" in run_kw:
        raise GridError("[stress] ops, seconds: give at most one of them")
    from .. import stress

    try:
        check_number(run_kw.get("seconds", 1.0), "seconds", 0, 3600, open_low=True)
        if run_kw.get("ops") is not None:
            check_int(run_kw["ops"], "ops", 1)
        tracker = _build_stress_tracker(tracker_kw, 0)
        # the library's own checks, on a run of one write per thread
        stress(tracker, **{**{k: v for k, v in run_kw.items() if k not in ("ops", "seconds")}, "ops": 1})
    except (ValueError, TypeError) as exc:
        raise GridError(f"[stress] {exc}") from None


def parse_grid(text: str, *, name: str = "grid") -> dict[str, list[dict[str, Any]]]:
    """Parse and validate a grid's TOML text into its points: ``{command: [params, ...]}``.

    :raises ValueError: (a :class:`GridError`) naming the table, key or value
        that is not valid TOML, not a command, not an option of the command, or out of its range.
    """
    try:
        import tomllib
    except ImportError:  # Python 3.10: the backport, a conditional dependency
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise GridError(f"{name}: not valid TOML: {exc}") from None
    return expand_grid(data)


def load_grid(path: str | os.PathLike[str]) -> dict[str, list[dict[str, Any]]]:
    """:func:`parse_grid` of a file."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise GridError(f"GRID: cannot read {os.fspath(path)!r}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise GridError(f"GRID: {os.fspath(path)!r} is not UTF-8 text") from None
    return parse_grid(text, name=os.fspath(path))


def expand_grid(data: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The points of a grid already parsed into ``{command: {key: [values]}}``, validated."""
    if not isinstance(data, Mapping) or not data:
        raise GridError(f"grid: expected at least one table of {', '.join(SWEEP_COMMANDS)}")
    out: dict[str, list[dict[str, Any]]] = {}
    total = 0
    for command, table in data.items():
        if command not in SWEEP_COMMANDS:
            raise GridError(f"grid: unknown table [{command}] (allowed: {', '.join(SWEEP_COMMANDS)})")
        if not isinstance(table, Mapping):
            raise GridError(f"grid: [{command}] must be a table of key = [values]")
        keys = list(table)
        lists = []
        for key in keys:
            values = table[key]
            if not isinstance(values, list):
                values = [values]
            if not values:
                raise GridError(f"[{command}] {key}: an empty list gives no points")
            lists.append(values)
        points = [dict(zip(keys, combo)) for combo in itertools.product(*lists)] if keys else [{}]
        total += len(points)
        if total > MAX_POINTS:
            raise GridError(f"grid: more than {MAX_POINTS:,} points")
        for params in points:
            if command == "stress":
                _check_stress(params)
            else:
                _argv(command, params)
        out[command] = points
    return {c: out[c] for c in SWEEP_COMMANDS if c in out}


# -- one task -------------------------------------------------------------------------------------------

def _takes_seed(command: str) -> bool:
    return command == "stress" or (_option_action(_command_parser(command), "seed") is not None)


def task_seed(command: str, params: Mapping[str, Any], rep: int) -> int | None:
    """The seed of one repetition: ``seed + rep`` if the grid fixes ``seed``, else derived from the
    point and the repetition; None for a command without randomness."""
    if not _takes_seed(command):
        return None
    if "seed" in params:
        return (int(params["seed"]) + rep) & _SEED_MASK
    blob = json.dumps([command, params, rep], sort_keys=True).encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:8], "big") & _SEED_MASK


def task_key(command: str, params: Mapping[str, Any], rep: int, seed: int | None) -> str:
    """The cache key: SHA-256 of (command, parameters, repetition, seed, package version)."""
    blob = json.dumps({"command": command, "params": params, "rep": rep, "seed": seed,
                       "version": __version__}, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


_LABEL_KEYS = ("variant", "bound", "name")


def _flatten(obj: Any, prefix: str = "", out: dict[str, float] | None = None) -> dict[str, float]:
    """The numbers of a command's JSON output, as ``name`` or ``label.name`` (a list item is labelled
    by its ``variant``, ``bound`` or ``name``, else its index; the configuration is left out)."""
    out = {} if out is None else out
    if isinstance(obj, Mapping):
        for key, value in obj.items():
            if key in ("config", "semantics", "per_thread", "counterexample", "counterexample_steps"):
                continue
            _flatten(value, prefix if key in ("rows", "runs") else f"{prefix}{key}.", out)
    elif isinstance(obj, list):
        for i, item in enumerate(obj):
            label = next((str(item[k]) for k in _LABEL_KEYS if isinstance(item, Mapping) and k in item), str(i))
            _flatten(item, f"{prefix}{label}.", out)
    elif isinstance(obj, bool):
        out[prefix[:-1]] = int(obj)
    elif isinstance(obj, (int, float)) and math.isfinite(obj):
        out[prefix[:-1]] = obj
    return out


def _worker_name() -> str:
    try:
        from distributed import get_worker
        return str(get_worker().address)
    except (ImportError, ValueError):
        return "local"


def run_task(command: str, params: Mapping[str, Any], rep: int, seed: int | None) -> dict[str, Any]:
    """Run one repetition of one point in this process and return its row (small: numbers only).

    This is what a worker executes; it calls the C models through the command's own code path.
    """
    t0 = time.perf_counter()
    if command == "stress":
        from .. import stress
        tracker_kw, run_kw = _stress_kwargs(params)
        if "ops" not in run_kw and "seconds" not in run_kw:
            run_kw["seconds"] = 1.0
        tracker = _build_stress_tracker(tracker_kw, seed or 0)
        result = stress(tracker, seed=seed or 0, **run_kw)
        result["stats"] = tracker.stats()
        result["memory"] = tracker.memory()
    else:
        argv = _argv(command, params)
        if seed is not None and "seed" not in params:
            argv.append(f"--seed={seed}")
        elif seed is not None:
            argv = [a for a in argv if not a.startswith("--seed=")] + [f"--seed={seed}"]
        args = _command_parser(command).parse_args(argv + ["--json"])
        buf, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
            rc = args.func(args)
        if rc:
            raise RuntimeError(f"pybcache {command} {' '.join(argv)} exited {rc}: {err.getvalue().strip()}")
        result = json.loads(buf.getvalue())
    return {"command": command, "params": dict(params), "rep": rep, "seed": seed,
            "figures": _flatten(result), "wall_s": time.perf_counter() - t0, "worker": _worker_name(),
            "version": __version__}


# -- the sweep ------------------------------------------------------------------------------------------

def _tasks(points: Mapping[str, Sequence[Mapping[str, Any]]],
           reps: int) -> list[tuple[str, dict, int, int | None, str]]:
    tasks = []
    for command, plist in points.items():
        for params in plist:
            for rep in range(reps):
                seed = task_seed(command, params, rep)
                tasks.append((command, dict(params), rep, seed, task_key(command, params, rep, seed)))
    return tasks


def _cache_path(out: str, key: str) -> str:
    return os.path.join(out, "cache", key[:2], key + ".json")


def _cache_get(out: str | None, key: str) -> dict[str, Any] | None:
    if out is None:
        return None
    try:
        with open(_cache_path(out, key), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None  # absent, or a torn file from an interrupted write: run again


def _cache_put(out: str | None, key: str, row: Mapping[str, Any]) -> None:
    if out is None:
        return
    path = _cache_path(out, key)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(row, f)
    os.replace(tmp, path)  # atomic: a reader sees the whole row or none


def sweep(points: Mapping[str, Sequence[Mapping[str, Any]]], *, reps: int = 1, out: str | None = None,
          client: Any = None, progress: Callable[[Iterable[Any], int], Iterable[Any]] | None = None,
          on_row: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run every point of ``points`` (from :func:`load_grid`) ``reps`` times.

    :param reps: repetitions per point, in [1, 10000]. Default 1.
    :param out: directory for the cache (``out/cache``); None: no cache.
    :param client: a ``dask.distributed.Client`` (see :func:`pybcache.dist.cluster.client_for`); None
        runs every task in this process, one after another.
    :param progress: optional ``(iterable, total) -> iterable`` wrapper (a progress bar).
    :param on_row: called in this process with each row as it arrives (cached rows first).
    :returns: ``{"rows": [...], "summary": [...], "cached": n, "ran": n, "interval": method}``;
        rows in grid order, each ``{command, params, rep, seed, figures, wall_s, worker}``.
    """
    reps = check_int(reps, "reps", 1, MAX_REPS)
    tasks = _tasks(points, reps)
    rows: dict[str, dict[str, Any]] = {}
    for *_, key in tasks:
        row = _cache_get(out, key)
        if row is not None:
            rows[key] = row
            if on_row:
                on_row(row)
    cached = len(rows)
    todo = [t for t in tasks if t[4] not in rows]

    def arrivals() -> Iterator[tuple[str, dict[str, Any]]]:
        if client is None:
            for command, params, rep, seed, key in todo:
                yield key, run_task(command, params, rep, seed)
            return
        from distributed import as_completed
        futures = {client.submit(run_task, command, params, rep, seed, key=f"pybcache-sweep-{key}",
                                 pure=False): key for command, params, rep, seed, key in todo}
        try:
            for fut in as_completed(futures):
                yield futures[fut], fut.result()
        finally:
            for fut in futures:
                fut.release()

    stream: Iterable[tuple[str, dict[str, Any]]] = arrivals()
    if progress is not None:
        stream = progress(stream, len(todo))
    for key, row in stream:
        if key in rows:  # cannot happen with one future per key; a rerun would be the same row
            continue
        rows[key] = row
        _cache_put(out, key, row)
        if on_row:
            on_row(row)
    ordered = [rows[key] for *_, key in tasks]
    return {"rows": ordered, "summary": summarize(ordered), "cached": cached, "ran": len(todo),
            "interval": INTERVAL_METHOD}


def _quantile(n: int) -> float:
    if INTERVAL_METHOD == "t":
        from scipy.stats import t
        return float(t.ppf(0.975, n - 1))
    return 1.959963984540054


def summarize(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per point (command and parameters): for each figure, the mean over repetitions and a 95 %
    interval (:data:`INTERVAL_METHOD`; None with one repetition)."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    order: list[str] = []
    for row in rows:
        k = json.dumps([row["command"], row["params"]], sort_keys=True)
        if k not in groups:
            groups[k] = []
            order.append(k)
        groups[k].append(row)
    out = []
    for k in order:
        g = groups[k]
        names = [n for n in g[0]["figures"] if all(n in r["figures"] for r in g)]
        figures: dict[str, dict[str, Any]] = {}
        for n in names:
            xs = [float(r["figures"][n]) for r in g]
            mean = sum(xs) / len(xs)
            if len(xs) > 1:
                sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
                half = _quantile(len(xs)) * sd / math.sqrt(len(xs))
                figures[n] = {"mean": mean, "ci_low": mean - half, "ci_high": mean + half, "n": len(xs)}
            else:
                figures[n] = {"mean": mean, "ci_low": None, "ci_high": None, "n": 1}
        out.append({"command": g[0]["command"], "params": g[0]["params"], "reps": len(g),
                    "wall_s_mean": sum(r["wall_s"] for r in g) / len(g), "figures": figures})
    return out


# -- tables and plots -----------------------------------------------------------------------------------

def _columns(rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[str]]:
    params: list[str] = []
    figures: list[str] = []
    for row in rows:
        params += [p for p in row["params"] if p not in params]
        figures += [f for f in row["figures"] if f not in figures]
    return params, figures


def write_tables(rows: Sequence[Mapping[str, Any]], out: str) -> list[str]:
    """One tidy table per command (``out/COMMAND.csv``, and ``.parquet`` when pyarrow is importable):
    a row per run with its parameters, repetition, seed, wall time, worker and figures. Returns paths."""
    os.makedirs(out, exist_ok=True)
    paths = []
    for command in SWEEP_COMMANDS:
        crow = [r for r in rows if r["command"] == command]
        if not crow:
            continue
        params, figures = _columns(crow)
        header = params + ["rep", "seed", "wall_s", "worker"] + figures
        records = [[r["params"].get(p) for p in params] + [r["rep"], r["seed"], r["wall_s"], r["worker"]]
                   + [r["figures"].get(f) for f in figures] for r in crow]
        path = os.path.join(out, f"{command}.csv")
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(header)
            w.writerows(records)
        paths.append(path)
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            continue
        table = pa.table({h: [str(x) if i < len(params) and x is not None else x for x in col]
                          for i, (h, col) in enumerate(zip(header, zip(*records)))})
        pq.write_table(table, os.path.join(out, f"{command}.parquet"))
        paths.append(os.path.join(out, f"{command}.parquet"))
    return paths


#: Figures plotted per command when present (fnmatch patterns over figure names).
PLOT_FIGURES = {
    "race": ("stale_reads", "stale_cached_blocks", "ops_per_s", "untracked_writes"),
    "stress": ("ops_per_s",),
    "fio": ("*.bypass_fraction", "*.tracking_pages", "*.ns_per_io_vs_none"),
    "explore": ("schedules", "violations"),
    "writeback": ("*.foreground_bandwidth_mib_s", "*.background_write_gib"),
}


def _sort_key(v: Any) -> tuple[int, Any]:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return (0, v)
    try:
        return (0, parse_size(str(v)))
    except ValueError:
        return (1, str(v))


def write_plots(summary: Sequence[Mapping[str, Any]], out: str) -> list[str]:
    """Per command and plotted figure, ``out/COMMAND-FIGURE.png``: the mean with its 95 % interval
    against the first numeric parameter that varies (else the first that varies), one line per
    combination of the other varying ones."""
    from fnmatch import fnmatch

    from matplotlib.figure import Figure

    os.makedirs(out, exist_ok=True)
    paths = []
    for command in SWEEP_COMMANDS:
        pts = [s for s in summary if s["command"] == command]
        if not pts:
            continue
        keys = list(pts[0]["params"])
        varying = [k for k in keys if len({json.dumps(s["params"].get(k)) for s in pts}) > 1]
        if not varying:
            continue
        # the x axis: the first varying parameter with numeric (or size) values, else the first one
        numeric = [k for k in varying if all(_sort_key(s["params"][k])[0] == 0 for s in pts)]
        x_key = (numeric or varying)[0]
        others = [k for k in varying if k != x_key]
        xs = sorted({json.dumps(s["params"][x_key]) for s in pts}, key=lambda v: _sort_key(json.loads(v)))
        names = [n for n in pts[0]["figures"] if any(fnmatch(n, pat) for pat in PLOT_FIGURES[command])]
        for name in names:
            fig = Figure(figsize=(6.4, 4.0))
            ax = fig.add_subplot()
            series: dict[str, list[Mapping[str, Any]]] = {}
            for s in pts:
                series.setdefault(", ".join(f"{k}={s['params'][k]}" for k in others) or command, []).append(s)
            for label, ss in series.items():
                ss = sorted(ss, key=lambda s: xs.index(json.dumps(s["params"][x_key])))
                px = [xs.index(json.dumps(s["params"][x_key])) for s in ss]
                figs = [s["figures"].get(name) for s in ss]
                py = [f["mean"] if f else math.nan for f in figs]
                err = [[(f["mean"] - f["ci_low"]) if f and f["ci_low"] is not None else 0 for f in figs],
                       [(f["ci_high"] - f["mean"]) if f and f["ci_high"] is not None else 0 for f in figs]]
                ax.errorbar(px, py, yerr=err, marker="o", capsize=3, label=label)
            ax.set_xticks(range(len(xs)), [str(json.loads(v)) for v in xs])
            ax.set_xlabel(x_key)
            ax.set_ylabel(name)
            ax.set_title(f"{command}: {name} (mean, 95% interval: {INTERVAL_METHOD})", fontsize=9)
            if len(series) > 1:
                ax.legend(fontsize=7)
            fig.tight_layout()
            path = os.path.join(out, f"{command}-{name.replace('/', '_')}.png")
            fig.savefig(path, dpi=100)
            paths.append(path)
    return paths
