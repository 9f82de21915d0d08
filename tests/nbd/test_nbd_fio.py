"""fio over NBD (``pybcache/bcache/nbd/fio.py``): fio's job, its output's parsing, the rounds and their merge,
with fio's and nbdkit's processes and the served model stood in for. No subprocess."""
from __future__ import annotations

import json
import os
import subprocess
import types

import pytest

from pybcache.bcache.nbd import fio as nbdfio
from pybcache.bcache.nbd.server import MODEL_KEYS
from pybcache.units import GiB, KiB, TiB


approx = pytest.approx


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
