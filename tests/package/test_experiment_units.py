"""The experiment modules' own logic on figures chosen here: the sustained-load rows and table, the fio-over-NBD
job, its parsing and merging, the distributed explorer's split and merge, the Dask cluster's arguments, and what
each report plot holds.

What would run something real is replaced by a stand-in: the tracker and its stress run, fio and nbdkit's
processes, the served model, the C explorer, ``dask.distributed`` and the PNG file (the plots' figure is kept
and read back instead of rendered). No subprocess, no cluster, nothing timed.
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import types
import warnings

import numpy as np
import pytest

from pybcache.dist import cluster as dask_cluster
from pybcache.dist import explore as distexplore
from pybcache.bcache.nbd import fio as nbdfio
from pybcache.report import plots
from pybcache.bcache.experiments import sustained
from pybcache.bcache.nbd.server import MODEL_KEYS
from pybcache.units import GiB, KiB, TiB

approx = pytest.approx


# ---- experiments/sustained.py -------------------------------------------------------------------------------

class _Fault:
    def __init__(self, *, probability, times):
        self.probability, self.times = probability, times


def _stand_in_tracker(monkeypatch):
    """Stand-ins for the tracker, its fault and ``stress``: the clean run finds 40 active chunks in 1,000
    checks, the faulted one 100 in 1,001; each tracker's stats differ so the row shows whose it took."""
    made, runs = [], []

    class Tracker:
        def __init__(self, size, **kw):
            self.size, self.kw = size, kw
            made.append(self)

        def stats(self):
            base = 1000 if self.kw["fault"] is None else 0
            return {k: base + i for i, k in enumerate(("alloc_failures", "pages_allocated", "hijack_events",
                                                        "untracked_writes", "underflows", "mempool_waits",
                                                        "pool_refills", "not_reported"))}

    def stress(t, **kw):
        runs.append((t, kw))
        faulted = t.kw["fault"] is not None
        return {"per_thread": [{"checks": 1001 if faulted else 1000, "active_hits": 100 if faulted else 40}]}

    monkeypatch.setattr(sustained, "BypassWriteTracker", Tracker)
    monkeypatch.setattr(sustained, "FaultInjection", _Fault)
    monkeypatch.setattr(sustained, "stress", stress)
    return made, runs


def test_sustained_load_runs_the_same_load_without_then_with_the_fault_and_divides_the_bypasses(monkeypatch):
    made, runs = _stand_in_tracker(monkeypatch)
    row = sustained.sustained_load("mempool", pool_pages=2, failures=3, ops=500, depth=7, seed=9, free="lazy")
    assert [t.size for t in made] == [64 * GiB, 64 * GiB]
    clean, faulted = made
    assert clean.kw == {"alloc_failure": "mempool", "pool_pages": 2, "fault": None, "free": "lazy"}
    assert faulted.kw["alloc_failure"] == "mempool" and faulted.kw["pool_pages"] == 2 and faulted.kw["free"] == "lazy"
    assert (faulted.kw["fault"].probability, faulted.kw["fault"].times) == (1.0, 3)
    for t, kw in runs:
        assert kw == {"threads": 1, "ops": 500, "depth": 7, "region": (0, 64 * GiB), "write_length": 128 * KiB,
                      "seed": 9, "completions": "inline"}
    assert [t for t, _ in runs] == made
    # the faulted run's checks and stats, both runs' bypasses, the ratio faulted / clean
    assert row == {"policy": "mempool", "pool_pages": 2, "failures": 3, "checks": 1001,
                   "bypasses_without_fault": 40, "bypasses_with_fault": 100, "ratio": 2.5,
                   "alloc_failures": 0, "pages_allocated": 1, "hijack_events": 2, "untracked_writes": 3,
                   "underflows": 4, "mempool_waits": 5, "pool_refills": 6}


def test_sustained_load_defaults_are_one_failure_of_200000_writes_160_deep_seed_3_eager(monkeypatch):
    made, runs = _stand_in_tracker(monkeypatch)
    row = sustained.sustained_load("hijack")
    assert made[0].kw == {"alloc_failure": "hijack", "pool_pages": 0, "fault": None, "free": "eager"}
    assert made[1].kw["fault"].times == 1
    assert {(kw["ops"], kw["depth"], kw["seed"]) for _, kw in runs} == {(200_000, 160, 3)}
    assert (row["pool_pages"], row["failures"]) == (0, 1)


@pytest.mark.parametrize("failures", [0, -1])
def test_sustained_load_refuses_fewer_than_one_failure_before_running(monkeypatch, failures):
    made, _ = _stand_in_tracker(monkeypatch)
    with pytest.raises(ValueError, match=rf"^failures must be >= 1, got {failures}$"):
        sustained.sustained_load("pool", failures=failures)
    assert made == []


def _stand_in_rows(monkeypatch):
    # main() sets the pybcache logger's level (it quiets the warnings it counts): put it back after the test
    log = logging.getLogger("pybcache")
    monkeypatch.setattr(log, "level", log.level)
    calls = []

    def sustained_load(policy, *, pool_pages, failures, ops, seed):
        calls.append((policy, pool_pages, failures, ops, seed))
        return {"policy": policy, "pool_pages": pool_pages, "failures": failures, "bypasses_without_fault": 8,
                "bypasses_with_fault": 10, "ratio": 10 / 8 + failures, "alloc_failures": failures,
                "pages_allocated": 1, "hijack_events": 2, "untracked_writes": 3, "underflows": 4,
                "mempool_waits": 5, "pool_refills": 6, "checks": 99}

    monkeypatch.setattr(sustained, "sustained_load", sustained_load)
    return calls


def test_the_sustained_table_has_a_row_per_failure_count_and_policy_with_the_ratio_to_3_places(monkeypatch, capsys):
    calls = _stand_in_rows(monkeypatch)
    assert sustained.main([]) == 0
    assert calls == [(p, n, f, 200_000, 3) for f in (1, 2) for p, n in sustained.POLICIES]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("| policy | pool_pages | failures | bypasses_without_fault | bypasses_with_fault | ratio | "
                        "alloc_failures | pages_allocated | hijack_events | untracked_writes | underflows | "
                        "mempool_waits | pool_refills |")
    assert lines[1] == "|" + "---|" * 13
    assert lines[2] == "| untracked | 0 | 1 | 8 | 10 | 2.250 | 1 | 1 | 2 | 3 | 4 | 5 | 6 |"
    assert lines[6] == "| mempool | 1 | 1 | 8 | 10 | 2.250 | 1 | 1 | 2 | 3 | 4 | 5 | 6 |"
    assert lines[7] == "| untracked | 0 | 2 | 8 | 10 | 3.250 | 2 | 1 | 2 | 3 | 4 | 5 | 6 |"
    assert len(lines) == 2 + 10


def test_the_sustained_json_holds_the_rows_of_the_failures_ops_and_seed_given(monkeypatch, capsys):
    calls = _stand_in_rows(monkeypatch)
    assert sustained.main(["--failures", "3", "4", "--ops", "10", "--seed", "7", "--json"]) == 0
    assert calls == [(p, n, f, 10, 7) for f in (3, 4) for p, n in sustained.POLICIES]
    out = capsys.readouterr().out
    rows = [sustained.sustained_load(p, pool_pages=n, failures=f, ops=10, seed=7)
            for f in (3, 4) for p, n in sustained.POLICIES]
    assert out == json.dumps({"rows": rows}, indent=1) + "\n"


def test_the_sustained_command_quiets_the_untracked_write_warnings_it_counts(monkeypatch, capsys):
    _stand_in_rows(monkeypatch)
    log = logging.getLogger("pybcache")
    monkeypatch.setattr(log, "level", logging.NOTSET)
    sustained.main(["--failures", "1", "--json"])
    assert log.level == logging.ERROR


def test_the_sustained_help_names_the_module_and_its_purpose(capsys, plain_help):
    with pytest.raises(SystemExit) as exc:
        sustained.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m pybcache.bcache.experiments.sustained ")
    # the description is the docstring's whole first paragraph, a full sentence
    assert ("\n\nAllocation failure under sustained load (issue 10 §3): what one failed page allocation costs "
            "each ``alloc_failure`` policy while writes keep arriving on the page.\n\noptions:") in \
        "\n\n".join(" ".join(p.split()) for p in out.split("\n\n"))


def test_the_old_sustained_module_is_the_same_experiment():
    import pybcache.bcache.experiments.sustained as old
    assert (old.sustained_load, old.POLICIES, old.main) == (sustained.sustained_load, sustained.POLICIES,
                                                            sustained.main)


# ---- nbdfio.py: fio's job, its output, the rounds ------------------------------------------------------------

def test_the_fio_job_is_the_posted_randrw_over_nbd_with_its_run_time_in_whole_ms():
    cmd = nbdfio._fio_command("nbd+unix:///?socket=/s", jobs=3, seconds=2.5, size=1 << 30, out="/o.json", seed=4)
    assert cmd == ["fio", "--name=posted", "--ioengine=nbd", "--uri=nbd+unix:///?socket=/s", "--rw=randrw",
                   "--bs=4096,131072", "--iodepth=32", "--numjobs=3", "--size=1073741824", "--time_based",
                   "--runtime=2500ms", "--group_reporting", "--lat_percentiles=1", "--randseed=4",
                   "--output-format=json", "--output=/o.json"]
    runtime = [a for a in nbdfio._fio_command("u", jobs=1, seconds=0.0016, size=1, out="o", seed=1)
               if a.startswith("--runtime=")]
    assert runtime == ["--runtime=2ms"]
    # never under 1 ms (fio reads 0 as "no limit")
    assert "--runtime=1ms" in nbdfio._fio_command("u", jobs=1, seconds=0.0004, size=1, out="o", seed=1)


def _job(r_iops=100.0, r_mean=2e6, r_p99=5e6, w_iops=50.0, w_mean=4e6, w_p99=None, error=0):
    def side(iops, mean, p99):
        lat = {"mean": mean}
        if p99 is not None:
            lat["percentile"] = {"50.000000": 1, "99.000000": p99}
        return {"iops": iops, "lat_ns": lat}
    return {"error": error, "read": side(r_iops, r_mean, r_p99), "write": side(w_iops, w_mean, w_p99)}


def test_fios_figures_are_iops_and_ms_of_the_mean_and_p99_latencies_with_a_missing_p99_as_zero():
    assert nbdfio._figures(_job()) == {"read_iops": 100.0, "write_iops": 50.0, "read_lat_mean_ms": 2.0,
                                       "read_lat_p99_ms": 5.0, "write_lat_mean_ms": 4.0, "write_lat_p99_ms": 0.0}
    job = _job()
    job["write"]["lat_ns"]["percentile"] = {"90.000000": 3}
    assert nbdfio._figures(job)["write_lat_p99_ms"] == 0.0


def _stand_in_fio(monkeypatch, *, job=None, rc=0, write=True, stderr="", stdout="", timeout=False):
    calls = []

    def run(cmd, **kw):
        out = next(a for a in cmd if a.startswith("--output=")).split("=", 1)[1]
        calls.append((cmd, kw, out))
        if timeout:
            raise subprocess.TimeoutExpired(cmd, kw["timeout"])
        if write:
            with open(out, "w") as f:
                json.dump({"jobs": [job or _job()]}, f)
        return types.SimpleNamespace(returncode=rc, stderr=stderr, stdout=stdout)

    monkeypatch.setattr(nbdfio.subprocess, "run", run)
    return calls


def test_run_fio_runs_the_job_bounded_by_a_minute_past_its_time_and_returns_its_figures(monkeypatch):
    calls = _stand_in_fio(monkeypatch)
    got = nbdfio.run_fio("nbd://x", jobs=2, seconds=1.5, size=1 << 20, seed=6)
    assert got == nbdfio._figures(_job())
    ((cmd, kw, out),) = calls
    assert cmd == nbdfio._fio_command("nbd://x", jobs=2, seconds=1.5, size=1 << 20, out=out, seed=6)
    assert kw == {"capture_output": True, "text": True, "timeout": 61.5, "check": False}
    assert os.path.basename(out) == "fio.json"
    assert os.path.basename(os.path.dirname(out)).startswith("pybcache-fio-")
    assert not os.path.exists(os.path.dirname(out))   # its directory is gone once read
    nbdfio.run_fio("nbd://x", jobs=2, seconds=1.5, size=1 << 20)
    assert "--randseed=1" in calls[-1][0]


def test_a_failed_fio_is_an_error_with_its_status_and_last_three_lines(monkeypatch):
    _stand_in_fio(monkeypatch, rc=3, stderr="one\ntwo\nthree\nfour\n", stdout="ignored")
    with pytest.raises(RuntimeError, match=r"^fio exited with status 3: two \| three \| four$"):
        nbdfio.run_fio("u", jobs=1, seconds=1, size=1)
    # nothing on stderr: its stdout's lines
    _stand_in_fio(monkeypatch, rc=1, stderr="", stdout="a\nb\n")
    with pytest.raises(RuntimeError, match=r"^fio exited with status 1: a \| b$"):
        nbdfio.run_fio("u", jobs=1, seconds=1, size=1)


def test_fio_without_its_output_file_is_an_error_even_at_status_0(monkeypatch):
    _stand_in_fio(monkeypatch, write=False, stderr="no output\n")
    with pytest.raises(RuntimeError, match=r"^fio exited with status 0: no output$"):
        nbdfio.run_fio("u", jobs=1, seconds=1, size=1)


def test_fio_over_its_bound_is_an_error_naming_the_bound(monkeypatch):
    _stand_in_fio(monkeypatch, timeout=True)
    with pytest.raises(RuntimeError, match=r"^fio did not finish within 62.5 s$") as exc:
        nbdfio.run_fio("u", jobs=1, seconds=2.5, size=1)
    assert exc.value.__suppress_context__


def test_an_error_fio_reports_in_its_job_is_an_error_naming_the_uri(monkeypatch):
    _stand_in_fio(monkeypatch, job=_job(error=5))
    with pytest.raises(RuntimeError, match=r"^fio reported error 5 against nbd://y$"):
        nbdfio.run_fio("nbd://y", jobs=1, seconds=1, size=1)


class _Proc:
    """A stand-in nbdkit: writes its pid file on the ``start_after``-th poll (never if None)."""

    def __init__(self, cmd, *, start_after=0, exit_code=None, stderr=b"", hang=False):
        self.cmd = cmd
        self.pidfile = cmd[cmd.index("-P") + 1]
        self.polls, self.start_after, self.exit_code, self.hang = 0, start_after, exit_code, hang
        self.stderr = types.SimpleNamespace(read=lambda: stderr, close=self._close, closed=False)
        self.events = []
        if start_after == 0:
            self._start()

    def _close(self):
        self.stderr.closed = True

    def _start(self):
        with open(self.pidfile, "w") as f:
            f.write("1")

    def poll(self):
        self.polls += 1
        if self.start_after is not None and self.polls == self.start_after:
            self._start()
        return self.exit_code

    def terminate(self):
        self.events.append("terminate")

    def kill(self):
        self.events.append("kill")

    def wait(self, timeout):
        self.events.append(("wait", timeout))
        if self.hang and self.events.count("kill") == 0:
            raise subprocess.TimeoutExpired(self.cmd, timeout)
        return 0


def _stand_in_nbdkit(monkeypatch, **proc_kw):
    made = []

    def popen(cmd, **kw):
        p = _Proc(cmd, **proc_kw)
        p.kw = kw
        made.append(p)
        return p

    monkeypatch.setattr(nbdfio.subprocess, "Popen", popen)
    return made


def test_the_memory_baseline_server_is_nbdkits_memory_plugin_with_the_delay_filter_for_a_write_delay(monkeypatch):
    made = _stand_in_nbdkit(monkeypatch)
    with nbdfio._memory_server(size=1 << 30, write_delay_ns=2_500_000, threads=8) as uri:
        (p,) = made
        sock = p.cmd[p.cmd.index("-U") + 1]
        assert uri == f"nbd+unix:///?socket={sock}"
        assert p.cmd == ["nbdkit", "--foreground", "--exit-with-parent", "-U", sock, "-P", p.pidfile,
                         "--threads", "8", "--filter=delay", "memory", "1073741824", "wdelay=2.5ms"]
        assert os.path.dirname(sock) == os.path.dirname(p.pidfile)
        assert os.path.basename(os.path.dirname(sock)).startswith("pybcache-nbd-")
        assert (os.path.basename(sock), os.path.basename(p.pidfile)) == ("nbd.sock", "pid")
        assert p.kw == {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE,
                        "start_new_session": True}
        assert p.events == []
    assert p.events == ["terminate", ("wait", 30)] and p.stderr.closed
    assert not os.path.exists(os.path.dirname(sock))


def test_the_memory_baseline_server_without_a_write_delay_has_no_filter(monkeypatch):
    made = _stand_in_nbdkit(monkeypatch)
    with nbdfio._memory_server(size=4096, write_delay_ns=0, threads=1):
        assert "--filter=delay" not in made[0].cmd
        assert made[0].cmd[-4:] == ["--threads", "1", "memory", "4096"]


def test_the_memory_server_is_waited_for_until_its_pid_file_appears(monkeypatch):
    made = _stand_in_nbdkit(monkeypatch, start_after=3)
    sleeps = []
    monkeypatch.setattr(nbdfio.time, "sleep", sleeps.append)
    with nbdfio._memory_server(size=4096, write_delay_ns=0, threads=1):
        assert made[0].polls == 3
    assert sleeps == [0.02, 0.02, 0.02]


def test_a_memory_server_that_exits_is_an_error_with_its_stderr_and_is_stopped(monkeypatch):
    made = _stand_in_nbdkit(monkeypatch, start_after=None, exit_code=1, stderr=b" plugin not found\n")
    with pytest.raises(RuntimeError, match=r"^nbdkit memory did not start: plugin not found$"):
        with nbdfio._memory_server(size=4096, write_delay_ns=0, threads=1):
            pytest.fail("yielded")
    assert made[0].events == ["terminate", ("wait", 30)]


def test_a_memory_server_silent_for_20_s_is_a_timeout_and_one_that_ignores_terminate_is_killed(monkeypatch):
    made = _stand_in_nbdkit(monkeypatch, start_after=None, hang=True)
    clock = iter([100.0, 110.0, 120.0, 120.1])
    monkeypatch.setattr(nbdfio.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(nbdfio.time, "sleep", lambda s: None)
    with pytest.raises(RuntimeError, match=r"^nbdkit memory did not start: timeout$"):
        with nbdfio._memory_server(size=4096, write_delay_ns=0, threads=1):
            pytest.fail("yielded")
    assert next(clock, "all read") == "all read"      # at 110 and at 120 s (the deadline itself) still waiting
    assert made[0].events == ["terminate", ("wait", 30), "kill", ("wait", 30)]


def test_the_memory_baseline_runs_the_job_once_against_the_memory_server(monkeypatch):
    seen = []

    class Server:
        def __init__(self, **kw):
            seen.append(("server", kw))

        def __enter__(self):
            return "nbd://mem"

        def __exit__(self, *exc):
            seen.append("stopped")

    monkeypatch.setattr(nbdfio, "_memory_server", lambda **kw: Server(**kw))
    monkeypatch.setattr(nbdfio, "run_fio", lambda uri, **kw: seen.append(("fio", uri, kw)) or {"read_iops": 7.0})
    got = nbdfio._memory_baseline(size=4096, write_delay_ns=9, jobs=2, seconds=0.5, threads=3)
    assert got == {"read_iops": 7.0}
    assert seen == [("server", {"size": 4096, "write_delay_ns": 9, "threads": 3}),
                    ("fio", "nbd://mem", {"jobs": 2, "seconds": 0.5, "size": 4096}), "stopped"]


def _part(r_iops, r_mean, r_p99, w_iops, w_mean, w_p99):
    return dict(zip(("read_iops", "read_lat_mean_ms", "read_lat_p99_ms", "write_iops", "write_lat_mean_ms",
                     "write_lat_p99_ms"), (r_iops, r_mean, r_p99, w_iops, w_mean, w_p99)))


def test_rounds_combine_into_mean_iops_iops_weighted_mean_latency_and_the_median_p99():
    parts = [_part(100.0, 1.0, 9.0, 10.0, 4.0, 1.0), _part(300.0, 3.0, 5.0, 30.0, 8.0, 2.0),
             _part(200.0, 2.0, 7.0, 0.0, 100.0, 30.0)]
    got = nbdfio._combine(parts)
    assert list(got) == list(nbdfio.FIO_KEYS)
    assert got == {"read_iops": 200.0, "write_iops": 40 / 3, "read_lat_mean_ms": approx((100 + 900 + 400) / 600),
                   "read_lat_p99_ms": 7.0, "write_lat_mean_ms": approx((40 + 240) / 40), "write_lat_p99_ms": 2.0}
    # no I/O on a side at all: a mean latency of 0, not a division by zero
    idle = nbdfio._combine([_part(0.0, 5.0, 1.0, 0.0, 5.0, 1.0), _part(0.0, 5.0, 3.0, 0.0, 5.0, 3.0)])
    assert (idle["read_lat_mean_ms"], idle["write_lat_mean_ms"], idle["read_lat_p99_ms"]) == (0.0, 0.0, 2.0)


class _Served:
    """A stand-in served model: its counters appear when it stops (at quiescence), as the real one's do."""

    made: list = []

    def __init__(self, *, sync, size, write_delay_ns, threads, stats=True):
        self.kw = {"sync": sync, "size": size, "write_delay_ns": write_delay_ns, "threads": threads}
        self.uri = f"nbd://{sync}"
        self.stats = None
        self.give = stats
        _Served.made.append(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.give:
            n = len(self.kw["sync"])
            self.stats = {**{k: n * (i + 1) for i, k in enumerate(MODEL_KEYS)}, "read_hits": 1000 + n,
                          "miss_collisions": 2000 + n, "not_reported": 5}


def _stand_in_fio_nbd(monkeypatch, *, stats=True, cpus=8):
    _Served.made = []
    events = []
    monkeypatch.setattr(nbdfio, "Server", lambda **kw: _Served(**kw, stats=stats))
    monkeypatch.setattr(nbdfio, "require_tools", lambda *t: events.append(("tools", t)))
    monkeypatch.setattr(nbdfio.os, "cpu_count", lambda: cpus)

    class Memory:
        def __init__(self, **kw):
            events.append(("memory", kw))

        def __enter__(self):
            return "nbd://memory"

        def __exit__(self, *exc):
            events.append("memory stopped")

    monkeypatch.setattr(nbdfio, "_memory_server", lambda **kw: Memory(**kw))

    def run_fio(uri, *, jobs, seconds, size, seed):
        events.append(("fio", uri, jobs, seconds, size, seed))
        k = seed * 10 + len(uri)
        return _part(float(k), 1.0, float(seed), float(k), 2.0, 3.0)

    monkeypatch.setattr(nbdfio, "run_fio", run_fio)
    return events


def test_fio_nbd_rotates_the_servers_order_each_round_and_reports_each_variants_rounds_and_counters(monkeypatch):
    events = _stand_in_fio_nbd(monkeypatch)
    progress = []

    def bar(items, total):
        progress.append((list(items), total))
        return progress[-1][0]

    got = nbdfio.fio_nbd(size=1 << 30, jobs=3, seconds=6.0, variants=("none", "page"), write_delay_ns=7,
                         threads=5, memory_baseline=True, rounds=2, progress=bar)
    assert [s.kw for s in _Served.made] == [{"sync": v, "size": 1 << 30, "write_delay_ns": 7, "threads": 5}
                                            for v in ("none", "page")]
    assert events[0] == ("tools", ("fio", "nbdkit"))
    assert events[1] == ("memory", {"size": 1 << 30, "write_delay_ns": 7, "threads": 5})
    order = [(0, "none"), (0, "page"), (0, "memory"), (1, "page"), (1, "memory"), (1, "none")]
    assert progress == [(order, 6)]
    assert events[2:8] == [("fio", f"nbd://{name}", 3, 3.0, 1 << 30, 1 + k) for k, name in order]
    assert events[8:] == ["memory stopped"]

    def combined(uri):
        return nbdfio._combine([_part(float(s * 10 + len(uri)), 1.0, float(s), float(s * 10 + len(uri)), 2.0, 3.0)
                                for s in (1, 2)])

    assert got["rows"] == [
        {"variant": v, "fio": combined(f"nbd://{v}"),
         "model": {**{k: n * (i + 1) for i, k in enumerate(MODEL_KEYS)}, "read_hits": 1000 + n,
                   "miss_collisions": 2000 + n}}
        for v, n in (("none", 4), ("page", 4))]
    assert got["baseline"] == {"fio": combined("nbd://memory")}
    assert got["config"] == {"engine": "nbd", "size": 1 << 30, "jobs": 3, "seconds": 6.0, "iodepth": 32,
                             "read_size": 4096, "write_size": 128 * KiB, "rw": "randrw", "write_delay_ns": 7,
                             "threads": 5, "variants": ["none", "page"], "rounds": 2}


def test_fio_nbd_defaults_to_every_variant_10_gib_3_s_in_one_round_without_a_baseline(monkeypatch):
    events = _stand_in_fio_nbd(monkeypatch, cpus=4)
    got = nbdfio.fio_nbd()
    assert [s.kw for s in _Served.made] == [{"sync": v, "size": 10 * GiB, "write_delay_ns": 5_000_000,
                                             "threads": 64} for v in ("none", "global", "page", "atomic")]
    assert [e for e in events if e[0] == "fio"] == [("fio", f"nbd://{v}", 4, 3.0, 10 * GiB, 1)
                                                    for v in ("none", "global", "page", "atomic")]
    assert got["baseline"] is None and "memory" not in str(events)
    assert (got["config"]["jobs"], got["config"]["rounds"], got["config"]["variants"]) == (
        4, 1, ["none", "global", "page", "atomic"])


@pytest.mark.parametrize("cpus, jobs", [(64, 16), (16, 16), (3, 3), (None, 1)])
def test_fio_nbd_runs_one_job_per_cpu_up_to_16_by_default(monkeypatch, cpus, jobs):
    _stand_in_fio_nbd(monkeypatch, cpus=cpus)
    assert nbdfio.fio_nbd(variants=["page"], seconds=1)["config"]["jobs"] == jobs


@pytest.mark.parametrize("seconds, rounds", [(1.0, 1), (3.9, 1), (4.0, 2), (9.0, 4), (10.0, 5), (3600, 5),
                                             (0.5, 1)])
def test_fio_nbd_rounds_default_to_one_per_2_s_between_1_and_5(monkeypatch, seconds, rounds):
    events = _stand_in_fio_nbd(monkeypatch)
    assert nbdfio.fio_nbd(variants=["page"], seconds=seconds)["config"]["rounds"] == rounds
    runs = [e for e in events if e[0] == "fio"]
    assert [e[5] for e in runs] == list(range(1, rounds + 1)) and {e[3] for e in runs} == {seconds / rounds}


def test_fio_nbd_takes_variants_as_a_comma_separated_string(monkeypatch):
    _stand_in_fio_nbd(monkeypatch)
    got = nbdfio.fio_nbd(variants=" page, ,none,", seconds=1)
    assert [r["variant"] for r in got["rows"]] == ["page", "none"] and got["config"]["variants"] == ["page", "none"]


@pytest.mark.parametrize("kw, exc, message", [
    ({"variants": []}, TypeError, r"^variants must be a non-empty list from \('none', 'global', 'page', 'atomic'\)$"),
    ({"variants": ""}, TypeError, r"^variants must be a non-empty list from "),
    ({"variants": {"page"}}, TypeError, r"^variants must be a non-empty list from "),
    ({"variants": ["page", "bogus"]}, ValueError,
     r"^variants must be one of \('none', 'global', 'page', 'atomic'\), got 'bogus'$"),
    ({"variants": ["page", "none", "page"]}, ValueError, r"^variants must not repeat, got \['page', 'none', 'page'\]$"),
    ({"size": 64 * KiB}, ValueError, r"^size must be"),
    ({"size": TiB + 128 * KiB}, ValueError, r"^size must be"),
    ({"size": 192 * KiB}, ValueError, r"^size must be a multiple of 131072 in \[131072, 1099511627776\], got 196608$"),
    ({"jobs": 0}, ValueError, r"^jobs must be"),
    ({"jobs": 257}, ValueError, r"^jobs must be"),
    ({"seconds": 0}, ValueError, r"^seconds must be"),
    ({"seconds": 3600.5}, ValueError, r"^seconds must be"),
    ({"rounds": 0}, ValueError, r"^rounds must be"),
    ({"rounds": 101}, ValueError, r"^rounds must be"),
    ({"write_delay_ns": -1}, ValueError, r"^write_delay_ns must be"),
    ({"write_delay_ns": 10 ** 10 + 1}, ValueError, r"^write_delay_ns must be"),
])
def test_fio_nbd_refuses_bad_arguments_by_name_before_looking_for_the_tools(monkeypatch, kw, exc, message):
    events = _stand_in_fio_nbd(monkeypatch)
    with pytest.raises(exc, match=message):
        nbdfio.fio_nbd(**kw)
    assert events == [] and _Served.made == []


def test_fio_nbd_accepts_the_ends_of_each_range(monkeypatch):
    _stand_in_fio_nbd(monkeypatch)
    got = nbdfio.fio_nbd(size=128 * KiB, jobs=1, seconds=0.01, rounds=1, write_delay_ns=0, variants=["none"])
    assert (got["config"]["size"], got["config"]["jobs"], got["config"]["write_delay_ns"]) == (128 * KiB, 1, 0)
    got = nbdfio.fio_nbd(size=TiB, jobs=256, seconds=3600, rounds=100, write_delay_ns=10 ** 10, variants=["none"])
    assert (got["config"]["size"], got["config"]["jobs"], got["config"]["rounds"]) == (TiB, 256, 100)


def test_a_server_that_wrote_no_counters_is_an_error_naming_its_variant(monkeypatch):
    _stand_in_fio_nbd(monkeypatch, stats=False)
    with pytest.raises(RuntimeError, match=r"^the global server wrote no counters$"):
        nbdfio.fio_nbd(variants=["global"], seconds=1)


# ---- distexplore.py: the split by prefix, the tasks' sums, the merge ------------------------------------------

def _result(schedules, violations, *, finished=True, cx=None):
    return {"schedules": schedules, "violations": violations, "finished": finished, "config": {"c": 1},
            "counterexample": cx, "counterexample_steps": None if cx is None else [f"step of {cx}"],
            "semantics": "s"}


def _clock(monkeypatch, *times):
    ticks = iter(times)
    monkeypatch.setattr(distexplore.time, "perf_counter", lambda: next(ticks))


def test_a_task_sums_its_subtrees_counts_and_keeps_the_first_counterexample_in_prefix_order(monkeypatch):
    results = {(0,): _result(3, 0), (1,): _result(5, 2, cx="A"), (2,): _result(7, 1, finished=False, cx="B")}
    seen = []
    monkeypatch.setattr(distexplore, "explore", lambda *, prefix, **cfg: seen.append((prefix, cfg))
                        or results[tuple(prefix)])
    _clock(monkeypatch, 10.0, 12.5)
    part = distexplore._explore_part({"sync": "page"}, [(0,), (1,), (2,)])
    assert seen == [((0,), {"sync": "page"}), ((1,), {"sync": "page"}), ((2,), {"sync": "page"})]
    assert part == {"schedules": 15, "violations": 3, "finished": False,
                    "first": {"counterexample": "A", "counterexample_steps": ["step of A"]}, "wall_s": 2.5}


def test_a_task_without_a_counterexample_has_none_and_is_finished_when_each_subtree_is(monkeypatch):
    monkeypatch.setattr(distexplore, "explore", lambda *, prefix, **cfg: _result(1, 0))
    _clock(monkeypatch, 0.0, 1.0)
    assert distexplore._explore_part({}, [(0,), (1,)]) == {"schedules": 2, "violations": 0, "finished": True,
                                                            "first": None, "wall_s": 1.0}


def _prefix_tree(monkeypatch, sizes):
    """explore_prefixes' stand-in: ``sizes[d]`` prefixes at depth d (None: more than 65,536)."""
    asked = []

    def explore_prefixes(depth, **cfg):
        asked.append((depth, cfg))
        n = sizes.get(depth, sizes[max(sizes)])
        return None if n is None else [(depth, i) for i in range(n)]

    monkeypatch.setattr(distexplore, "explore_prefixes", explore_prefixes)
    return asked


def test_prefixes_are_cut_at_the_first_depth_with_as_many_as_wanted(monkeypatch):
    asked = _prefix_tree(monkeypatch, {1: 2, 2: 5, 3: 9, 4: 20})
    d, got = distexplore._choose_prefixes({"sync": "none"}, 9, None)
    assert (d, got) == (3, [(3, i) for i in range(9)])
    assert asked == [(1, {"sync": "none"}), (2, {"sync": "none"}), (3, {"sync": "none"})]
    assert distexplore._choose_prefixes({}, 2, None)[0] == 1


def test_prefixes_stop_above_a_depth_with_too_many_or_where_the_tree_ends(monkeypatch):
    _prefix_tree(monkeypatch, {1: 2, 2: 5, 3: None})
    assert distexplore._choose_prefixes({}, 100, None) == (2, [(2, i) for i in range(5)])
    asked = _prefix_tree(monkeypatch, {1: 2, 2: 5, 3: 5})     # the tree ends at depth 2
    assert distexplore._choose_prefixes({}, 100, None)[0] == 2 and [a[0] for a in asked] == [1, 2, 3]
    _prefix_tree(monkeypatch, {1: None})                      # even depth 1 too wide: no prefix at all
    assert distexplore._choose_prefixes({}, 4, None) == (1, [])


def test_prefixes_go_no_deeper_than_64(monkeypatch):
    asked = _prefix_tree(monkeypatch, {d: d for d in range(1, 70)})
    assert distexplore._choose_prefixes({}, 10 ** 6, None)[0] == 64
    assert [a[0] for a in asked] == list(range(1, 65))


def test_a_depth_given_is_used_as_it_is_or_refused_naming_it_when_too_wide(monkeypatch):
    asked = _prefix_tree(monkeypatch, {1: 2, 5: 3, 6: None})
    assert distexplore._choose_prefixes({"x": 1}, 1000, 5) == (5, [(5, 0), (5, 1), (5, 2)])
    assert asked == [(5, {"x": 1})]
    with pytest.raises(ValueError, match=r"^depth: more than 65,536 prefixes at depth 6; choose a smaller one$"):
        distexplore._choose_prefixes({}, 1, 6)


class _Client:
    def __init__(self, workers):
        self.workers, self.submitted = workers, []

    def nthreads(self):
        return {f"w{i}": 1 for i in range(self.workers)}

    def submit(self, fn, *args, **kw):
        self.submitted.append((fn, args, kw))
        return len(self.submitted) - 1

    def gather(self, futures):
        return [fn(*args) for fn, args, _ in (self.submitted[f] for f in futures)]


def _stand_in_explorer(monkeypatch, prefixes=10, cx_at=(), finished=True):
    """An explorer whose subtree below prefix (d, i) has i + 1 schedules and, for i in ``cx_at``, one violation
    with counterexample i."""
    whole = []

    def explore(*, prefix=None, max_schedules=0, **cfg):
        if prefix is None:
            whole.append((max_schedules, cfg))
            return {"config": {**cfg, "max_schedules": max_schedules}}
        i = prefix[1]
        return _result(i + 1, int(i in cx_at), finished=finished, cx=i if i in cx_at else None)

    monkeypatch.setattr(distexplore, "explore", explore)
    # depth 3 would be chosen by default: a test giving depth 2 sees it used
    _prefix_tree(monkeypatch, {1: 2, 2: prefixes, 3: 100})
    ticks = iter(range(100, 1000))
    monkeypatch.setattr(distexplore.time, "perf_counter", lambda: float(next(ticks)))
    return whole


def test_the_split_runs_contiguous_runs_of_prefixes_as_tasks_and_adds_their_counts(monkeypatch):
    _stand_in_explorer(monkeypatch, prefixes=10, cx_at=(6, 8))
    client = _Client(workers=2)
    got = distexplore.explore_distributed(client=client, tasks_per_worker=2, depth=2, sync="page")
    # 2 workers x 2 tasks: 10 prefixes in runs of ceil(10 / 4) = 3
    assert [args[1] for _, args, _ in client.submitted] == [[(2, 0), (2, 1), (2, 2)], [(2, 3), (2, 4), (2, 5)],
                                                            [(2, 6), (2, 7), (2, 8)], [(2, 9)]]
    assert all(fn is distexplore._explore_part and args[0] == {"sync": "page"} and kw == {"pure": False}
               for fn, args, kw in client.submitted)
    assert got["schedules"] == sum(range(1, 11)) and got["violations"] == 2 and got["finished"] is True
    assert (got["counterexample"], got["counterexample_steps"]) == (6, ["step of 6"])
    assert got["semantics"] == distexplore.EXPLORER_SEMANTICS
    assert got["config"] == {"sync": "page", "max_schedules": 0}
    d = got["distributed"]
    assert {k: d[k] for k in ("workers", "tasks", "prefix_depth", "prefixes")} == {
        "workers": 2, "tasks": 4, "prefix_depth": 2, "prefixes": 10}
    # each task's clock read twice (1 s apart here), the whole split's around them
    assert d["task_wall_s"] == 4.0 and d["wall_s"] == 9.0
    # the explorer's keys with the counts summed, then the merged ones: nothing of the tasks' own
    assert list(got) == ["schedules", "violations", "finished", "counterexample", "counterexample_steps",
                         "semantics", "config", "distributed"]


def test_the_split_is_unfinished_if_any_task_is_and_has_no_counterexample_if_none_found_one(monkeypatch):
    _stand_in_explorer(monkeypatch, prefixes=3, finished=False)
    got = distexplore.explore_distributed(client=_Client(workers=1), tasks_per_worker=16, depth=2)
    assert got["finished"] is False and got["counterexample"] is None and got["counterexample_steps"] is None
    assert got["distributed"]["tasks"] == 3     # fewer prefixes than tasks: one each


def test_the_default_depth_gives_each_task_four_prefixes(monkeypatch):
    _stand_in_explorer(monkeypatch)
    asked = _prefix_tree(monkeypatch, {1: 2, 2: 7, 3: 24, 4: 50})
    got = distexplore.explore_distributed(client=_Client(workers=3), tasks_per_worker=2)
    assert [a[0] for a in asked] == [1, 2, 3]
    assert got["distributed"]["prefix_depth"] == 3 and got["distributed"]["tasks"] == 6


def test_no_workers_runs_the_same_tasks_in_this_process_without_dask(monkeypatch):
    _stand_in_explorer(monkeypatch, prefixes=5, cx_at=(4,))
    got = distexplore.explore_distributed(workers=0, tasks_per_worker=2, depth=2)
    # one "worker": 2 tasks of ceil(5 / 2) = 3 prefixes; reported as 0 workers (no Dask)
    assert got["distributed"]["workers"] == 0 and got["distributed"]["tasks"] == 2
    assert got["schedules"] == 15 and got["counterexample"] == 4
    assert got["distributed"]["prefix_depth"] == 2 and got["config"] == {"max_schedules": 0}


def test_without_a_client_the_split_runs_on_the_cluster_client_for_gives_and_closes_it(monkeypatch):
    _stand_in_explorer(monkeypatch, prefixes=4)
    events = []

    class Cm:
        def __enter__(self):
            events.append("open")
            return _Client(workers=4)

        def __exit__(self, *exc):
            events.append("closed")

    def client_for(**kw):
        events.append(kw)
        return Cm()

    monkeypatch.setattr(dask_cluster, "client_for", client_for)
    got = distexplore.explore_distributed(scheduler="tcp://h:1", depth=2, tasks_per_worker=1)
    assert events == [{"scheduler": "tcp://h:1", "workers": None}, "open", "closed"]
    assert got["distributed"]["prefix_depth"] == 2 and got["config"] == {"max_schedules": 0}
    assert got["distributed"]["workers"] == 4 and got["distributed"]["tasks"] == 4
    distexplore.explore_distributed(workers=3, depth=2)
    assert events[3] == {"scheduler": None, "workers": 3}


def test_each_worker_gets_16_tasks_by_default(monkeypatch):
    _stand_in_explorer(monkeypatch, prefixes=34)
    # one worker, 16 tasks: 34 prefixes in runs of ceil(34 / 16) = 3, so 12 tasks (17 would make runs of 2)
    assert distexplore.explore_distributed(workers=0, depth=2)["distributed"]["tasks"] == 12


def test_the_configuration_is_checked_by_one_capped_explore_before_any_split(monkeypatch):
    whole = _stand_in_explorer(monkeypatch)
    distexplore.explore_distributed(workers=0, depth=2, sync="atomic", max_schedules=0)
    assert whole == [(1, {"sync": "atomic"})]


@pytest.mark.parametrize("kw, exc, message", [
    ({"progress": print}, TypeError, r"^explore_distributed: progress is not taken$"),
    ({"prefix": (0,)}, TypeError, r"^explore_distributed: prefix is not taken$"),
    ({"max_schedules": 5}, ValueError, r"^max_schedules: not with the distributed explorer \(a cap has no meaning "
                                       r"once the tree is split\); give 0$"),
    ({"tasks_per_worker": 0}, ValueError, r"^tasks_per_worker must be"),
    ({"tasks_per_worker": 1025}, ValueError, r"^tasks_per_worker must be"),
    ({"depth": 0}, ValueError, r"^depth must be"),
    ({"depth": 65}, ValueError, r"^depth must be"),
])
def test_the_distributed_explorer_refuses_bad_arguments_before_exploring(monkeypatch, kw, exc, message):
    whole = _stand_in_explorer(monkeypatch)
    with pytest.raises(exc, match=message):
        distexplore.explore_distributed(workers=0, **kw)
    assert whole == []


def test_the_distributed_explorer_takes_the_ends_of_its_ranges(monkeypatch):
    _stand_in_explorer(monkeypatch)
    _prefix_tree(monkeypatch, {1: 2, 64: 3})
    got = distexplore.explore_distributed(workers=0, tasks_per_worker=1024, depth=64)
    assert got["distributed"]["prefix_depth"] == 64
    assert distexplore.explore_distributed(workers=0, tasks_per_worker=1, depth=1)["distributed"]["tasks"] == 1


# ---- dask_cluster.py: the scheduler address, the embedded cluster's arguments ---------------------------------

def _stand_in_distributed(monkeypatch, *, unreachable=None):
    events = []

    class Client:
        def __init__(self, target, **kw):
            if unreachable is not None:
                raise unreachable
            events.append(("client", target, kw))
            self.dashboard_link = "http://127.0.0.1:1234/status"

        def close(self):
            events.append("client closed")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.close()

    class LocalCluster:
        def __init__(self, **kw):
            events.append(("cluster", kw))

        def close(self):
            events.append("cluster closed")

    monkeypatch.setitem(sys.modules, "distributed", types.SimpleNamespace(Client=Client, LocalCluster=LocalCluster))
    monkeypatch.delenv(dask_cluster.SCHEDULER_ENV, raising=False)
    return events


def test_dask_is_available_exactly_when_distributed_imports(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)
    assert dask_cluster.dask_available() is False
    monkeypatch.setitem(sys.modules, "distributed", types.SimpleNamespace())
    assert dask_cluster.dask_available() is True


@pytest.mark.parametrize("address", ["tcp://h:1", "tls://10.0.0.1:8786", "tcp://my-host.example_1:2", "ucx://h",
                                     "ws://h:65535",
                                     "wss://h:1", " tcp://h:1\n", "tcp://[::1]:8786", "tcp://[fe80::1]"])
def test_a_scheduler_address_is_a_dask_protocol_a_host_and_an_optional_port(address):
    assert dask_cluster.check_scheduler_address(address) == address.strip()


@pytest.mark.parametrize("address", ["", "h:1", "http://h:1", "tcp://", "tcp://a b:1", "tcp://h/path", "xtcp://h:1",
                                     "tcp://h:1 x", "TCP://h:1", "tcp://h:x", "tcp://h:", "tcp://h:0", "tcp://h:65536",
                                     "tcp://h:123456", "tcp://h:1:2", "tcp://::1:8786", "tcp://[::1", "tcp://[h]:1",
                                     "inproc://10.0.0.1/4242/1", "tcp://h:\u0661\u0662", "tcp://h?x,y@z:1"])
def test_anything_else_is_refused_naming_the_option(address):
    with pytest.raises(ValueError,
                       match=r"^--scheduler: expected an address like tcp://HOST:PORT \(PORT 1\.\.65535\), got "):
        dask_cluster.check_scheduler_address(address, name="--scheduler")


def test_a_scheduler_that_is_not_a_string_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match=r"^scheduler must be a str like tcp://HOST:PORT, got int$"):
        dask_cluster.check_scheduler_address(5)


def test_an_existing_scheduler_gets_a_client_with_a_10_s_timeout_closed_after_the_block(monkeypatch):
    events = _stand_in_distributed(monkeypatch)
    with dask_cluster.client_for(scheduler=" tcp://h:1 ") as c:
        assert events == [("client", "tcp://h:1", {"timeout": "10s"})]
        assert c.dashboard_link
    assert events[1:] == ["client closed"]


def test_the_scheduler_comes_from_the_environment_when_none_is_given_and_errors_name_the_variable(monkeypatch):
    events = _stand_in_distributed(monkeypatch)
    monkeypatch.setenv("PYBCACHE_SCHEDULER", "tcp://env:2")
    with dask_cluster.client_for():
        pass
    assert events[0][1] == "tcp://env:2"
    monkeypatch.setenv("PYBCACHE_SCHEDULER", "bogus")
    with pytest.raises(ValueError, match=r"^PYBCACHE_SCHEDULER: expected an address like"):
        with dask_cluster.client_for():
            pass
    monkeypatch.setenv("PYBCACHE_SCHEDULER", "")       # empty: the embedded cluster
    with dask_cluster.client_for(workers=1):
        pass
    assert events[-4][0] == "cluster"


def test_an_unreachable_scheduler_is_a_value_error_naming_it(monkeypatch):
    _stand_in_distributed(monkeypatch, unreachable=OSError("refused"))
    with pytest.raises(ValueError, match=r"^scheduler: cannot reach tcp://h:1: refused$"):
        with dask_cluster.client_for(scheduler="tcp://h:1"):
            pass
    _stand_in_distributed(monkeypatch, unreachable=TimeoutError("slow"))
    with pytest.raises(ValueError, match=r"^scheduler: cannot reach tcp://h:1: slow$"):
        with dask_cluster.client_for(scheduler="tcp://h:1"):
            pass


def test_workers_are_refused_with_an_existing_scheduler_and_outside_1_to_256(monkeypatch):
    events = _stand_in_distributed(monkeypatch)
    with pytest.raises(ValueError, match=r"^workers: only for the embedded cluster, not with an existing scheduler$"):
        with dask_cluster.client_for(scheduler="tcp://h:1", workers=2):
            pass
    for bad in (0, 257):
        with pytest.raises(ValueError, match=r"^workers must be"):
            with dask_cluster.client_for(workers=bad):
                pass
    assert events == []


def test_without_dask_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(ImportError,
                       match=r"^dask.distributed is not installed: pip install 'pybcache\[distributed\]'$"):
        with dask_cluster.client_for(workers=1):
            pass


def test_the_embedded_cluster_is_one_thread_per_worker_process_on_a_free_port_and_closed_after(monkeypatch, capsys):
    events = _stand_in_distributed(monkeypatch)
    with dask_cluster.client_for(workers=256):
        assert events == [("cluster", {"n_workers": 256, "threads_per_worker": 1, "processes": True,
                                       "dashboard_address": None, "silence_logs": logging.ERROR,
                                       "scheduler_kwargs": {"dashboard_address": "127.0.0.1:0"}}),
                          ("client", events[1][1], {})]
        assert type(events[1][1]).__name__ == "LocalCluster"     # the client of that cluster
    assert events[2:] == ["client closed", "cluster closed"]
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(dask_cluster.os, "cpu_count", lambda: 6)
    with dask_cluster.client_for():
        pass
    assert events[4][1]["n_workers"] == 6
    monkeypatch.setattr(dask_cluster.os, "cpu_count", lambda: None)
    with dask_cluster.client_for():
        pass
    assert events[8][1]["n_workers"] == 1


def test_the_embedded_clusters_dashboard_is_served_on_request_and_its_address_printed(monkeypatch, capsys):
    events = _stand_in_distributed(monkeypatch)
    with dask_cluster.client_for(workers=1, dashboard=True):
        pass
    kw = events[0][1]
    assert (kw["dashboard_address"], kw["scheduler_kwargs"]) == (":0", None)
    assert capsys.readouterr().err == "pybcache: Dask dashboard at http://127.0.0.1:1234/status\n"


def test_the_embedded_cluster_is_closed_when_the_block_fails(monkeypatch):
    events = _stand_in_distributed(monkeypatch)
    with pytest.raises(KeyError):
        with dask_cluster.client_for(workers=1):
            raise KeyError("x")
    assert events[-2:] == ["client closed", "cluster closed"]


# ---- plots.py: what each figure holds (its data, labels, titles, scales), its file -----------------------------

import matplotlib  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402


@pytest.fixture
def drawn(monkeypatch):
    """The plots' figures, kept instead of rendered: ``[(figure, path)]``; ``tight_layout`` (which lays the
    text out, most of a plot's time) is recorded on the figure instead of run."""
    figs = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figs.append((fig, path)) or path)
    monkeypatch.setattr(plots.Figure, "tight_layout", lambda fig: setattr(fig, "laid_out", True))
    # matplotlib's own defaults, whatever matplotlibrc the user (or the working directory) has
    with warnings.catch_warnings(), matplotlib.rc_context():
        matplotlib.rcdefaults()
        warnings.simplefilter("error", UserWarning)  # drawn as asked: nothing matplotlib had to correct or ignore
        yield figs


def _lines(ax):
    """Each labelled line: label -> (x, y, colour, linestyle, marker)."""
    return {ln.get_label(): ([float(v) for v in ln.get_xdata()], [float(v) for v in ln.get_ydata()],
                             to_rgba(ln.get_color()), ln.get_linestyle(), ln.get_marker())
            for ln in ax.get_lines() if not ln.get_label().startswith("_")}


def _bars(ax):
    """Each bar series: label -> ([(x, width, height, y)], colour of its first bar)."""
    return {c.get_label(): ([tuple(round(float(v), 9) for v in (p.get_x(), p.get_width(), p.get_height(), p.get_y()))
                             for p in c.patches],
                            to_rgba(c.patches[0].get_facecolor()) if c.patches else None) for c in ax.containers}


def _legend(holder):
    return [t.get_text() for t in holder.get_legend().get_texts()]


_LOC = {2: "upper left", 3: "lower left", 4: "lower right", 9: "upper center"}


def _legend_style(leg, frame):
    """Where a legend sits and how it is set: (location, anchor in ``frame``'s coordinates or None, columns,
    font size, title)."""
    bb = leg.get_bbox_to_anchor()
    anchor = tuple(round(float(v), 6) for v in frame.inverted().transform((bb.x0, bb.y0)))
    return (_LOC.get(leg._loc, leg._loc), anchor, leg._ncols, leg.prop.get_size(),
            leg.get_title().get_text() or None)


def _grid(ax):
    """(x grid shown, y grid shown, the shown lines' alpha)."""
    xs, ys = ax.xaxis.get_gridlines(), ax.yaxis.get_gridlines()
    shown = [g for g in (xs[:1] + ys[:1]) if g.get_visible()]
    return (bool(xs) and xs[0].get_visible(), bool(ys) and ys[0].get_visible(),
            shown[0].get_alpha() if shown else None)


def test_a_plot_is_saved_at_110_dpi_trimmed_into_its_directory_made_if_missing(tmp_path):
    saved = []
    fig = types.SimpleNamespace(savefig=lambda path, **kw: saved.append((path, kw)))
    path = str(tmp_path / "a" / "b" / "p.png")
    assert plots._save(fig, path) == path
    assert saved == [(path, {"dpi": 110, "bbox_inches": "tight"})] and (tmp_path / "a" / "b").is_dir()
    assert plots._DPI == 110


def test_tick_labels_are_bytes_and_nanoseconds_in_their_largest_unit():
    assert plots._bytes_label(float(1 << 30)) == "1 GiB" and plots._bytes_label(4096.0, 3) == "4 KiB"
    assert [plots._ns_label(x) for x in (2.5e6, 1e6, 999_999.0, 1e3, 999.0, 0.5)] == [
        "2.5 ms", "1 ms", "999.999 µs", "1 µs", "999 ns", "0.5 ns"]


def test_the_memory_plot_draws_peak_and_idle_per_variant_in_size_order_log_log_with_the_posted_as_crosses(drawn):
    rows = [{"size_bytes": s, "variant": v, "idle_bytes": s >> 20 + k, "peak_bytes": s >> 10 + k}
            for s in (1 << 40, 1 << 30) for k, v in enumerate(("page", "global"))]
    seed = [{"size_bytes": 1 << 35, "variant": "page", "idle_bytes": 7, "peak_bytes": 9}]
    assert plots.plot_memory(rows, "m.png", posted_points=seed) == "m.png"
    ((fig, path),) = drawn
    assert path == "m.png" and tuple(fig.get_size_inches()) == (7.5, 4.8)
    (ax,) = fig.axes
    xs = [float(1 << 30), float(1 << 40)]
    lines = _lines(ax)
    assert lines == {
        "page: peak (every page)": (xs, [float(1 << 20), float(1 << 30)], to_rgba("#1f77b4"), "-", "o"),
        "page: idle (directory only)": (xs, [float(1 << 10), float(1 << 20)], to_rgba("#1f77b4"), "--", "None"),
        "global: peak (every page)": (xs, [float(1 << 19), float(1 << 29)], to_rgba("#d62728"), "-", "o"),
        "global: idle (directory only)": (xs, [float(1 << 9), float(1 << 19)], to_rgba("#d62728"), "--", "None"),
        "posted table (idle and peak)": ([float(1 << 35)], [7.0], to_rgba("k"), "None", "x")}
    unlabelled = [ln for ln in ax.get_lines() if ln.get_label().startswith("_")]
    assert [(list(ln.get_xdata()), list(ln.get_ydata()), ln.get_marker()) for ln in unlabelled] == [
        ([1 << 35], [9], "x")]
    # page is drawn thinner, on top of global's identical memory
    assert {ln.get_label(): ln.get_linewidth() for ln in ax.get_lines() if ":" in ln.get_label()} == {
        "page: peak (every page)": 1.4, "page: idle (directory only)": 1.4, "global: peak (every page)": 2.4,
        "global: idle (directory only)": 2.4}
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
    assert ax.xaxis.get_transform().base == 2 and ax.yaxis.get_transform().base == 2
    assert ax.xaxis.get_major_formatter().func is plots._bytes_label
    assert ax.yaxis.get_major_formatter().func is plots._bytes_label
    assert ax.get_xlabel() == "backing device size (bytes, log scale)"
    assert ax.get_ylabel() == "tracker memory (bytes, log scale)"
    assert ax.get_title() == "Tracker memory vs device size, measured from real trackers"
    assert _legend(ax) == list(lines)
    assert all(t.get_rotation() == 30 and t.get_horizontalalignment() == "right" for t in ax.get_xticklabels())
    assert {ln.get_label(): ln.get_markersize() for ln in ax.get_lines() if ln.get_marker() != "None"} == {
        "page: peak (every page)": 3.5, "global: peak (every page)": 3.5, "posted table (idle and peak)": 8,
        unlabelled[0].get_label(): 8}
    style = _legend_style(ax.get_legend(), ax.transAxes)
    assert style[0] == "upper left" and style[2:] == (1, 8, None)
    assert _grid(ax) == (True, True, 0.3)


def test_the_memory_plot_without_posted_points_draws_no_crosses(drawn):
    plots.plot_memory([{"size_bytes": 1 << 30, "variant": "atomic", "idle_bytes": 1, "peak_bytes": 2}], "m.png")
    (ax,) = drawn[0][0].axes
    assert [ln.get_label() for ln in ax.get_lines()] == ["atomic: peak (every page)", "atomic: idle (directory only)"]


def _scaling(threads=(1, 2, 4)):
    def row(n, k):
        return {"threads": n, "cpu_ns_per_op": 40.0 * n + k, "ops_per_s": 1e6 * (n + k),
                "p50_ns": 70 * n if n > 1 else 0,
                "p99_ns": 0 if n == 1 else 100 * n + k, "max_ns": 10_000 * n if n > 1 else 0}
    return {"variants": {v: [row(n, k) for n in threads] for k, v in enumerate(("global", "page"))},
            "params": {"threads": list(threads), "cpus": 2, "sample_every": 32, "repeats": 3, "seconds": 0.25}}


def test_the_scaling_plot_has_cpu_bars_throughput_and_latency_per_thread_count_with_the_target(drawn):
    assert plots.plot_scaling(_scaling(), "s.png", target_ns=20_000) == "s.png"
    ((fig, path),) = drawn
    assert path == "s.png" and fig.laid_out and fig._suptitle.get_position()[1] == 1.02
    assert len({ax.get_position().y0 for ax in fig.axes}) == 1      # three panels side by side
    assert tuple(fig.get_size_inches()) == (15, 4.6)
    assert fig._suptitle.get_text() == ("Tracker scaling and oversubscription: the v2 cover letter's 10 GiB "
                                        "workload, best of 3 x "
                                        "0.25 s")
    cpu, tput, lat = fig.axes
    # two variants side by side, 0.4 wide, centred on each thread count's tick
    bars = _bars(cpu)
    assert bars["global"] == ([(-0.4, 0.4, 40.0, 0), (0.6, 0.4, 80.0, 0), (1.6, 0.4, 160.0, 0)],
                              to_rgba("#d62728"))
    assert [b[:3] for b in bars["page"][0]] == [(0.0, 0.4, 41.0), (1.0, 0.4, 81.0), (2.0, 0.4, 161.0)]
    assert [t.get_text() for t in cpu.get_xticklabels()] == ["1", "2", "4"] and list(cpu.get_xticks()) == [0, 1, 2]
    assert (cpu.get_xlabel(), cpu.get_ylabel(), cpu.get_title()) == (
        "threads (all on 2 CPUs)", "CPU time per op (ns)", "CPU ns per op (end + start + check)")
    assert cpu.get_legend().get_title().get_text() == "variant" and _legend(cpu) == ["global", "page"]
    assert _legend_style(cpu.get_legend(), cpu.transAxes)[2:] == (1, 8, "variant") and _grid(cpu) == (False, True, 0.3)

    assert _lines(tput) == {"global": ([1, 2, 4], [1.0, 2.0, 4.0], to_rgba("#d62728"), "-", "o"),
                            "page": ([1, 2, 4], [2.0, 3.0, 5.0], to_rgba("#1f77b4"), "-", "o")}
    (span,) = [p for p in tput.patches if p.get_label() == "more threads than 2 CPUs"]
    assert (span.get_x(), span.get_width()) == (2.5, 2.0)
    assert to_rgba(span.get_facecolor()) == to_rgba("0.9") and span.get_zorder() == 0
    assert tput.get_legend().prop.get_size() == 8 and _grid(tput) == (True, True, 0.3)
    assert list(tput.get_xticks()) == [1, 2, 4] and tput.get_xlim() == (0.5, 4.5) and tput.get_ylim()[0] == 0
    assert (tput.get_xlabel(), tput.get_ylabel(), tput.get_title()) == (
        "threads (all on 2 CPUs)", "throughput (million ops/s, all threads)", "Throughput")
    assert _legend(tput) == ["global", "page", "more threads than 2 CPUs"]

    lines = _lines(lat)
    # latencies of 0 drawn at 1 ns (a log scale)
    assert lines["global p50"] == ([1, 2, 4], [1.0, 140.0, 280.0], to_rgba("#d62728"), "--", "o")
    assert lines["global p99"] == ([1, 2, 4], [1.0, 200.0, 400.0], to_rgba("#d62728"), "-", "s")
    assert lines["page p99"][1] == [1.0, 201.0, 401.0]
    assert lines["page max (sampled)"] == ([1, 2, 4], [1.0, 2e4, 4e4], to_rgba("#1f77b4"), ":", "None")
    assert lines["p99 target 20 µs"][1] == [20_000.0, 20_000.0] and lines["p99 target 20 µs"][2] == to_rgba("k")
    (shade,) = [p for p in lat.patches]
    assert (shade.get_x(), shade.get_width()) == (2.5, 2.0)
    assert to_rgba(shade.get_facecolor()) == to_rgba("0.9") and shade.get_zorder() == 0
    sizes = {ln.get_label(): (ln.get_markersize(), ln.get_linewidth(), ln.get_linestyle()) for ln in lat.get_lines()}
    assert sizes["global p50"][0] == 4 and sizes["page p99"][0] == 4 and sizes["global max (sampled)"][1] == 1
    assert sizes["p99 target 20 µs"][1:] == (1, "-.")
    assert _legend_style(lat.get_legend(), lat.transAxes) == ("upper center", (0.5, -0.16), 3, 7, None)
    assert _grid(lat) == (True, True, 0.3)
    assert lat.get_yscale() == "log" and lat.yaxis.get_major_formatter().func is plots._ns_label
    assert list(lat.get_xticks()) == [1, 2, 4] and lat.get_xlim() == (0.5, 4.5)
    assert (lat.get_xlabel(), lat.get_ylabel(), lat.get_title()) == (
        "threads (all on 2 CPUs)", "per-op latency (log scale)", "Per-op latency (1 op in 32 timed)")
    assert _legend(lat) == ["global p50", "global p99", "global max (sampled)", "page p50", "page p99",
                            "page max (sampled)", "p99 target 20 µs"]


def test_the_scaling_plot_of_one_variant_without_a_target_draws_its_bars_0_8_wide_and_no_target_line(drawn):
    one = _scaling()
    one["variants"] = {"page": one["variants"]["page"]}
    plots.plot_scaling(one, "s.png")
    assert not any("target" in label for label in _lines(drawn[0][0].axes[2]))
    assert [b[:2] for b in _bars(drawn[0][0].axes[0])["page"][0]] == [(-0.4, 0.8), (0.6, 0.8), (1.6, 0.8)]


def test_the_stale_reads_plot_shows_each_configurations_count_red_if_any_and_a_green_dot_at_zero(drawn):
    race = [{"label": "none", "stale_reads_per_s": 1234.0}, {"label": "page", "stale_reads_per_s": 0.0},
            {"label": "global", "stale_reads_per_s": 1.0}]
    expl = [{"label": "none", "violations": 5}, {"label": "page", "violations": 0}, {"label": "atomic",
                                                                                    "violations": 0}]
    assert plots.plot_stale_reads(race, expl, "r.png") == "r.png"
    ((fig, path),) = drawn
    assert path == "r.png" and fig.laid_out
    assert fig.axes[0].get_position().y0 == fig.axes[1].get_position().y0     # side by side
    assert tuple(fig.get_size_inches()) == (14, 3.2)    # 3 rows: the minimum height
    left, right = fig.axes
    for ax, vals, labels, xlabel, title in (
            (left, [1234.0, 0.0, 1.0], ["none", "page", "global"], "stale reads per second (symlog scale)",
             "Race stress: stale reads served"),
            (right, [5, 0, 0], ["none", "page", "atomic"],
             "schedules with a stale read or stale cached block (symlog)", "Explorer: violating interleavings")):
        (bars,) = ax.containers
        assert [(p.get_width(), p.get_y() + p.get_height() / 2) for p in bars.patches] == [
            (v, i) for i, v in enumerate(vals)]
        assert [to_rgba(p.get_facecolor()) for p in bars.patches] == [
            to_rgba("#d62728" if v > 0 else "#2ca02c") for v in vals]
        (dots,) = ax.get_lines()
        zeros = [i for i, v in enumerate(vals) if v <= 0]
        assert (list(dots.get_xdata()), list(dots.get_ydata())) == ([0] * len(zeros), zeros)
        assert to_rgba(dots.get_color()) == to_rgba("#2ca02c") and dots.get_marker() == "o"
        # drawn above the axis, unclipped, at a size that shows
        assert (dots.get_markersize(), dots.get_clip_on(), dots.get_zorder()) == (7, False, 3)
        assert {t.get_fontsize() for t in ax.get_yticklabels()} == {8}
        assert {(t.get_verticalalignment(), t.get_fontsize()) for t in ax.texts} == {("center", 8)}
        assert _grid(ax) == (True, False, 0.3)
        assert _legend_style(ax.get_legend(), ax.transAxes)[0::3] == ("lower right", 8)
        assert [to_rgba(h.get_facecolor() if hasattr(h, "get_facecolor") and not hasattr(h, "get_marker") else
                        h.get_color()) for h in ax.get_legend().legend_handles] == [to_rgba("#d62728"),
                                                                                    to_rgba("#2ca02c")]
        assert ax.get_legend().legend_handles[1].get_marker() == "o"
        assert ax.get_legend().legend_handles[1].get_linestyle() == "None"     # a dot, no line
        assert [t.get_text() for t in ax.get_yticklabels()] == labels and ax.yaxis_inverted()
        assert ax.get_xscale() == "symlog" and ax.xaxis.get_transform().linthresh == 1
        assert ax.get_xlim() == (0, max(1.0, *vals) * 8)
        assert [(t.get_text(), t.get_position()) for t in ax.texts] == [
            (f"{v:,.0f}", (max(v, 0) * 1.15 + 0.2, i)) for i, v in enumerate(vals)]
        assert (ax.get_xlabel(), ax.get_title()) == (xlabel, title)
        assert _legend(ax) == ["stale data served", "none (0)"]


def test_the_stale_reads_plot_grows_with_its_rows_from_a_minimum_height(drawn):
    plots.plot_stale_reads([{"label": "a", "stale_reads_per_s": 1.0}], [], "r.png")
    plots.plot_stale_reads([{"label": str(i), "stale_reads_per_s": 1.0} for i in range(10)], [], "r.png")
    assert [tuple(f.get_size_inches()) for f, _ in drawn] == [(14, 3.2), (14, approx(0.42 * 10 + 1.4))]
    # counts of 1 and none at all: the axis still runs from 0 to 8 (1 x 8)
    assert [ax.get_xlim() for ax in drawn[0][0].axes] == [(0, 8.0), (0, 8.0)]


def test_the_counts_heatmap_spans_each_sample_until_the_next_one_with_one_colour_per_count(drawn):
    counts = np.array([[0, 1, 2], [3, 0, 0], [1, 1, 1], [0, 0, 2]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # drawn as asked, nothing matplotlib had to correct
        # but a deprecation is not a wrong drawing: CI installs the newest matplotlib and numpy (their
        # versions are not capped), and one deprecating a call made here failed this test with the plot right
        # (shown with BoundaryNorm made to warn as a MatplotlibDeprecationWarning, a DeprecationWarning)
        warnings.simplefilter("default", DeprecationWarning)
        warnings.simplefilter("default", PendingDeprecationWarning)
        assert plots.plot_counts_heatmap([0.002, 0.004, 0.010, 0.020], counts, "h.png", chunk_size=32 << 20,
                                         title="T") == "h.png"
    ((fig, path),) = drawn
    assert path == "h.png"
    assert tuple(fig.get_size_inches()) == (10, 4.8)
    ax, bar = fig.axes
    (mesh,) = ax.collections
    xy = mesh.get_coordinates()
    # edges halfway between the samples (ms), the first and last as far out as their inner halves
    assert list(xy[0, :, 0]) == approx([1.0, 3.0, 7.0, 15.0, 25.0])
    assert list(xy[:, 0, 1]) == [-0.5, 0.5, 1.5, 2.5]
    assert np.array_equal(mesh.get_array(), counts.T)
    assert mesh.get_cmap().name == "magma" and list(mesh.norm.boundaries) == [-0.5, 0.5, 1.5, 2.5, 3.5]
    assert ax.yaxis_inverted()
    assert list(bar.get_yticks()) == [0, 1, 2, 3]
    assert bar.get_ylabel() == "in-flight bypass writes on the chunk (counter)"
    assert ax.get_xlabel() == "time since the workload started (ms)"
    assert ax.get_ylabel() == "chunk index (32 MiB chunks)" and ax.get_title() == "T"


def test_a_heatmap_of_two_samples_spans_each_until_the_midpoint_and_as_far_beyond(drawn):
    plots.plot_counts_heatmap([0.001, 0.005], np.ones((2, 1)), "h.png", chunk_size=4096)
    (mesh,) = drawn[0][0].axes[0].collections
    assert list(mesh.get_coordinates()[0, :, 0]) == approx([-1.0, 3.0, 7.0])


def test_a_heatmap_of_no_sample_is_one_empty_cell_from_0_to_1_ms(drawn):
    plots.plot_counts_heatmap([], np.zeros((0, 1)), "h.png", chunk_size=4096)
    ax, bar = drawn[0][0].axes
    (mesh,) = ax.collections
    assert list(mesh.get_coordinates()[0, :, 0]) == [0.0, 1.0] and list(mesh.get_coordinates()[:, 0, 1]) == [-0.5, 0.5]
    assert np.array_equal(mesh.get_array(), np.zeros((1, 1))) and list(bar.get_yticks()) == [0, 1]


def test_a_heatmap_of_one_sample_spans_a_millisecond_and_of_zeros_still_has_a_0_and_1_colour(drawn):
    plots.plot_counts_heatmap([0.003], np.zeros((1, 2)), "h.png", chunk_size=4096)
    ax, bar = drawn[0][0].axes
    (mesh,) = ax.collections
    assert list(mesh.get_coordinates()[0, :, 0]) == approx([2.5, 3.5])
    assert list(mesh.norm.boundaries) == [-0.5, 0.5, 1.5] and list(bar.get_yticks()) == [0, 1]
    assert ax.get_title() == "Tracker counters during a fio-like run"
    assert ax.get_ylabel() == "chunk index (4 KiB chunks)"


def test_the_writeback_timeline_has_dirty_pages_and_stacked_bandwidth_per_mechanism_on_one_scale(drawn):
    a = {"t": [0.5, 1.0, 1.5], "dirty_mib": {"all dirty pages": [1, 2, 3], "bdev mapping": [0, 1, 0]},
         "bandwidth_mib_s": {"foreground": [150, 160, 170], "bdev": [50, 40, 30]}}
    b = {"t": [0.5, 1.0], "dirty_mib": {"all dirty pages": [4, 5]}, "bandwidth_mib_s": {"foreground": [10, 400]}}
    assert plots.plot_writeback_timeline({"baseline": a, "patched": b}, "w.png") == "w.png"
    ((fig, path),) = drawn
    assert path == "w.png" and fig.laid_out
    assert tuple(fig.get_size_inches()) == (14, approx(7.2))
    (d0, bw0, d1, bw1) = fig.axes
    palette = plots.colormaps.get_cmap("tab10")
    # colours: the sources first, then the dirty categories, the same in every row
    assert _lines(d0) == {"all dirty pages": ([0.5, 1.0, 1.5], [1, 2, 3], to_rgba(palette(2)), "-", "None"),
                          "bdev mapping": ([0.5, 1.0, 1.5], [0, 1, 0], to_rgba(palette(3)), "-", "None")}
    assert _lines(d1) == {"all dirty pages": ([0.5, 1.0], [4, 5], to_rgba(palette(2)), "-", "None")}
    for ax, name in ((d0, "baseline"), (d1, "patched")):
        assert (ax.get_ylabel(), ax.get_title()) == ("dirty page cache (MiB)", f"{name}: dirty pages")
    for ax, name in ((bw0, "baseline"), (bw1, "patched")):
        assert (ax.get_ylabel(), ax.get_title()) == ("device bandwidth (MiB/s)", f"{name}: device bandwidth by source")
        # one scale for every row: the largest stacked total (400) plus 8 %
        assert ax.get_ylim() == approx((0, 432.0))
    fg, bd = bw0.collections
    assert (fg.get_label(), bd.get_label()) == ("foreground", "bdev")
    assert to_rgba(fg.get_facecolor()[0]) == to_rgba(palette(0), 0.9) and to_rgba(bd.get_facecolor()[0]) == to_rgba(
        palette(1), 0.9)
    # each bin's mean drawn back to the previous sample, the first from t = 0
    top = fg.get_paths()[0].vertices
    assert min(top[:, 0]) == 0.0 and max(top[:, 0]) == 1.5
    assert {float(y) for x, y in top if 0 < x < 0.5} <= {0.0, 150.0}
    assert {float(y) for y in top[:, 1]} == {0.0, 150.0, 160.0, 170.0}
    assert {float(y) for x, y in top if x == 0} == {0.0, 150.0}
    # steps: at each sample the next bin's value starts
    assert {(0.5, 150.0), (0.5, 160.0), (1.0, 160.0), (1.0, 170.0)} <= {(float(x), float(y)) for x, y in top}
    assert {float(y) for y in bd.get_paths()[0].vertices[:, 1]} == {150.0, 160.0, 170.0, 200.0}
    assert [ax.get_xlabel() for ax in fig.axes] == ["", "", "simulated time (s)", "simulated time (s)"]
    assert d0.get_shared_x_axes().joined(d0, bw1)
    dirty, written = fig.legends
    assert (dirty.get_title().get_text(), [t.get_text() for t in dirty.get_texts()]) == (
        "dirty pages of", ["all dirty pages", "bdev mapping"])
    assert (written.get_title().get_text(), [t.get_text() for t in written.get_texts()]) == (
        "bytes written by", ["foreground", "bdev"])
    assert _legend_style(dirty, fig.transFigure) == ("upper center", (0.27, 0.0), 2, 8, "dirty pages of")
    assert _legend_style(written, fig.transFigure) == ("upper center", (0.76, 0.0), 2, 8, "bytes written by")
    assert [to_rgba(h.get_facecolor()) for h in written.legend_handles] == [to_rgba(palette(0), 0.9),
                                                                             to_rgba(palette(1), 0.9)]
    assert [to_rgba(h.get_color()) for h in dirty.legend_handles] == [to_rgba(palette(2)), to_rgba(palette(3))]
    assert {ln.get_linewidth() for ln in d0.get_lines()} == {1.4}
    assert {_grid(ax) for ax in fig.axes} == {(True, True, 0.3)}


def test_an_empty_timeline_keeps_a_bandwidth_scale_of_1(drawn):
    plots.plot_writeback_timeline({"x": {"t": [], "dirty_mib": {"d": []}, "bandwidth_mib_s": {"s": []}}}, "w.png")
    assert drawn[0][0].axes[1].get_ylim() == approx((0, 1.08))


def test_the_sensitivity_plot_has_each_perturbations_two_changes_and_the_two_thresholds(drawn):
    rows = [{"name": n, "change_percent": {"background_write_gib": bg, "foreground_bandwidth_mib_s": fg}}
            for n, bg, fg in (("default", -40, 1.5), ("slow disk", -3, 0.0), ("fast", "-12.5", 2))]
    assert plots.plot_writeback_sensitivity(rows, "s.png", holds_percent=20, vanishes_percent=5) == "s.png"
    ((fig, path),) = drawn
    assert path == "s.png" and fig.laid_out
    # side by side, one row
    assert fig.axes[0].get_position().y0 == fig.axes[1].get_position().y0
    assert fig.axes[0].get_position().x1 < fig.axes[1].get_position().x0
    assert tuple(fig.get_size_inches()) == (13, approx(0.42 * 3 + 1.6))
    bg, fg = fig.axes
    for ax, vals, label, color in ((bg, [-40.0, -3.0, -12.5], "background file write I/O change (%)", "tab:red"),
                                   (fg, [1.5, 0.0, 2.0], "foreground bandwidth change (%)", "tab:blue")):
        (bars,) = ax.containers
        # table order top to bottom
        assert [(p.get_width(), p.get_y() + p.get_height() / 2) for p in bars.patches] == list(zip(vals, [2, 1, 0]))
        assert to_rgba(bars.patches[0].get_facecolor()) == to_rgba(color, 0.8)
        assert ax.get_xlabel() == label
        zero = [ln for ln in ax.get_lines() if list(ln.get_xdata()) == [0.0, 0.0]]
        assert len(zero) == 1 and to_rgba(zero[0].get_color()) == to_rgba("black") and zero[0].get_linewidth() == 0.8
        assert _grid(ax) == (True, False, 0.3)
    lines = _lines(bg)
    assert lines["holds: cut >= 20 %"][0] == [-20.0, -20.0] and lines["holds: cut >= 20 %"][3] == "--"
    assert lines["vanishes: cut < 5 %"][0] == [-5.0, -5.0] and lines["vanishes: cut < 5 %"][3] == ":"
    assert _legend(bg) == ["holds: cut >= 20 %", "vanishes: cut < 5 %"] and fg.get_legend() is None
    assert lines["holds: cut >= 20 %"][2] == lines["vanishes: cut < 5 %"][2] == to_rgba("grey")
    assert {ln.get_linewidth() for ln in bg.get_lines() if "cut" in ln.get_label()} == {1}
    assert _legend_style(bg.get_legend(), bg.transAxes)[0::3] == ("lower left", 8)
    assert {t.get_fontsize() for t in bg.get_yticklabels()} == {8}
    assert [t.get_text() for t in bg.get_yticklabels()] == ["default", "slow disk", "fast"]
    assert list(bg.get_yticks()) == [2, 1, 0] and bg.get_shared_y_axes().joined(bg, fg)


def _fio_run(ratio, fraction):
    return {"rows": [{"variant": v, "ns_per_io_vs_none": None if v == "none" else ratio + k,
                      "insert_fraction": fraction + k / 10} for k, v in enumerate(("none", "global", "page"))]}


def test_the_fio_plot_has_each_variants_overhead_beside_the_posted_and_the_cache_inserts_beside_nvme_util(drawn):
    runs = {"10 GiB": _fio_run(1.0, 0.5), "320 GiB": _fio_run(0.0, 0.25)}
    assert plots.plot_fio(runs, "f.png", posted_ratios={"10 GiB": {"page": 1.16}},
                          posted_util={"320 GiB": {"none": 66.9}}) == "f.png"
    ((fig, path),) = drawn
    assert path == "f.png" and fig.laid_out
    assert fig.axes[0].get_position().y0 == fig.axes[1].get_position().y0    # side by side
    assert tuple(fig.get_size_inches()) == (13, 4.4)
    cpu, inserts = fig.axes
    # the unpatched variant is the unit: not a bar of its own; a missing ratio is drawn as 0
    bars = _bars(cpu)
    assert list(bars) == ["global (model, this run)", "page (model, this run)"]
    assert [b[:3] for b in bars["global (model, this run)"][0]] == [(-0.4, 0.4, 2.0), (0.6, 0.4, 1.0)]
    assert [b[:3] for b in bars["page (model, this run)"][0]] == [(0.0, 0.4, 3.0), (1.0, 0.4, 2.0)]
    assert bars["page (model, this run)"][1] == to_rgba("#1f77b4")
    seed = _lines(cpu)["posted: kernel CPU vs unpatched"]
    assert seed[0] == [-0.2, 0.8] and seed[1][0] != seed[1][0] and seed[1][1] != seed[1][1]   # NaN: none given
    (page_seed,) = [ln for ln in cpu.get_lines() if ln.get_label().startswith("_") and ln.get_marker() == "D"]
    assert list(page_seed.get_ydata())[0] == 1.16 and page_seed.get_marker() == "D"
    (one,) = [ln for ln in cpu.get_lines() if list(ln.get_ydata()) == [1.0, 1.0]]
    assert to_rgba(one.get_color()) == to_rgba("k") and one.get_linewidth() == 0.8
    assert {ln.get_markersize() for ln in cpu.get_lines() + inserts.get_lines() if ln.get_marker() == "D"} == {5}
    assert _legend_style(cpu.get_legend(), cpu.transAxes) == ("upper center", (0.5, -0.14), 2, 8, None)
    assert _legend_style(inserts.get_legend(), inserts.transAxes) == ("upper center", (0.5, -0.14), 3, 8, None)
    assert _grid(cpu) == _grid(inserts) == (False, True, 0.3)
    for ax in (cpu, inserts):
        assert [t.get_text() for t in ax.get_xticklabels()] == ["10 GiB", "320 GiB"]
        assert ax.get_xlabel() == "working set"
    assert (cpu.get_ylabel(), cpu.get_title()) == ("CPU per I/O relative to unpatched (x)",
                                                   "Tracking overhead (median of per-round ratios)")
    assert sorted(_legend(cpu)) == ["global (model, this run)", "page (model, this run)",
                                    "posted: kernel CPU vs unpatched"]
    bars = _bars(inserts)
    assert list(bars) == ["none (model, this run)", "global (model, this run)", "page (model, this run)"]
    w = 0.8 / 3
    assert [b[:3] for b in bars["none (model, this run)"][0]] == [(approx(-1.5 * w), approx(w), 50.0),
                                                                  (approx(1 - 1.5 * w), approx(w), 25.0)]
    assert [b[2] for b in bars["page (model, this run)"][0]] == [approx(70.0), approx(45.0)]
    assert [bars[f"{v} (model, this run)"][1] for v in ("none", "global", "page")] == [
        to_rgba(plots.VARIANT_COLORS[v]) for v in ("none", "global", "page")]
    assert {ln.get_marker() for ln in inserts.get_lines()} == {"D"}
    util = _lines(inserts)["posted: NVMe util (%)"]
    assert util[1][1] == 66.9 and util[1][0] != util[1][0] and util[0] == [approx(-w), approx(1 - w)]
    assert (inserts.get_ylabel(), inserts.get_title()) == ("reads that populate the cache (%)",
                                                           "Cache inserts (the v2 cover letter's NVMe-util analogue)")
    assert inserts.get_ylim() == (0, 105)
    assert sorted(_legend(inserts)) == sorted(list(bars) + ["posted: NVMe util (%)"])


def test_the_fio_plot_of_one_variant_beside_the_unpatched_draws_it_0_8_wide_and_a_missing_ratio_as_0(drawn):
    def run(ratio):
        return {"rows": [{"variant": "none", "ns_per_io_vs_none": None, "insert_fraction": 0.5},
                         {"variant": "page", "ns_per_io_vs_none": ratio, "insert_fraction": 0.25}]}
    plots.plot_fio({"10 GiB": run(1.5), "20 GiB": run(None)}, "f.png")
    cpu, inserts = drawn[0][0].axes
    assert _bars(cpu)["page (model, this run)"][0] == [(-0.4, 0.8, 1.5, 0.0), (0.6, 0.8, 0.0, 0.0)]
    assert [b[:3] for b in _bars(inserts)["page (model, this run)"][0]] == [(0.0, 0.4, 25.0), (1.0, 0.4, 25.0)]


def test_the_fio_plot_of_the_unpatched_alone_draws_its_inserts_0_8_wide_and_no_empty_legend(drawn):
    plots.plot_fio({"10 GiB": {"rows": [{"variant": "none", "ns_per_io_vs_none": None,
                                         "insert_fraction": 0.5}]}}, "f.png")  # (no warning: the fixture)
    cpu, inserts = drawn[0][0].axes
    assert _bars(cpu) == {} and cpu.get_legend() is None   # the overhead panel has nothing to show
    assert _bars(inserts)["none (model, this run)"][0] == [(-0.4, 0.8, 50.0, 0.0)]


def test_the_fio_plot_without_posted_figures_draws_only_the_models(drawn):
    plots.plot_fio({"10 GiB": _fio_run(1.0, 0.5)}, "f.png")
    cpu, inserts = drawn[0][0].axes
    assert [list(ln.get_ydata()) for ln in cpu.get_lines()] == [[1.0, 1.0]] and inserts.get_lines() == []
