"""``pybcache serve`` (``pybcache/commands/serve.py``). The experiment it starts is stood in for (no subprocess, no C
model): these tests state what the command hands on, prints, writes as JSON and returns for given arguments and
results."""
from __future__ import annotations

import json
import os
import signal

import pytest

from pybcache import commands
from pybcache.commands import serve
from pybcache._console import format_table

from helpers.command_stand_ins import _args, _patch


_STATS = {"reads": 1000, "writes": 200, "read_bypasses": 3, "cache_inserts": 400, "stale_reads": 0,
          "stale_cached_blocks": 0, "read_hits": 500, "miss_collisions": 1, "nbd_trims": 2, "nbd_flushes": 7}


class _FakeServer:
    """pybcache.bcache.nbd.server.Server stood in for: records its
    arguments and the signal handlers in force at each call;
    ``wait`` follows a script (a status, None for "still running", or a signal to send to this process)."""
    instances: list = []

    def __init__(self, script=(), stats=_STATS, start_exc=None, **kw):
        self.kw, self.script, self.stats, self.start_exc = kw, list(script), stats, start_exc
        self.uri = "nbd+unix:///?socket=/tmp/s"
        self.events = []
        _FakeServer.instances.append(self)

    def start(self):
        self.events.append("start")
        if self.start_exc is not None:
            raise self.start_exc
        return self

    def wait(self, timeout=None):
        self.events.append(("wait", timeout))
        step = self.script.pop(0) if self.script else signal.SIGTERM
        if isinstance(step, signal.Signals):
            # the command's handler, else the signal would end the test process instead of failing the test
            assert signal.getsignal(step) is serve._raise_stop
            os.kill(os.getpid(), step)
            return None
        return step

    def stop(self):
        self.events.append(("stop", signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)))
        return self.stats


def _fake_server(monkeypatch, **behaviour):
    import pybcache.bcache.nbd.server
    _FakeServer.instances = []
    monkeypatch.setattr(pybcache.bcache.nbd.server, "Server", lambda **kw: _FakeServer(**behaviour, **kw))
    return _FakeServer.instances


def _serve_table(stats=_STATS):
    return format_table(["Counter", "Value"], [
        ["Reads", "1,000"], ["Writes (bypass)", "200"], ["Read bypasses", "3"], ["Cache inserts", "400"],
        ["Stale reads", "0"], ["Stale cached blocks", "0"], ["Read hits", "500"], ["Miss collisions", "1"],
        ["Trims", "2"], ["Flushes", "7"]])


_SERVE_BANNER = ("pybcache serve: sync=page, 10737418240 bytes, write delay 5 ms, at nbd+unix:///?socket=/tmp/s\n"
                 "pybcache serve: Ctrl-C (SIGINT) or SIGTERM stops it and prints the model's counters\n")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_runs_until_a_signal_then_stops_with_signals_ignored_and_prints_the_counters(monkeypatch, capsys,
                                                                                          sig):
    before = (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT))
    servers = _fake_server(monkeypatch, script=[None, None, sig])
    assert serve.run(_args("serve")) == 0
    (server,) = servers
    assert server.kw == dict(sync="page", size=10 << 30, write_delay_ns=5_000_000, socket=None, port=None,
                             threads=64, hung_timeout=None)
    assert server.events == ["start", ("wait", 0.5), ("wait", 0.5), ("wait", 0.5),
                             ("stop", signal.SIG_IGN, signal.SIG_IGN)]
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    assert capsys.readouterr().out == _SERVE_BANNER + _serve_table() + "\n"


def test_serve_hands_every_option_given_to_the_server(monkeypatch, capsys):
    servers = _fake_server(monkeypatch)
    assert serve.run(_args("serve", "--sync", "none", "--size", "1T", "--write-delay", "250us", "--port", "10809",
                           "--threads", "1")) == 0
    assert servers[0].kw == dict(sync="none", size=1 << 40, write_delay_ns=250_000, socket=None, port=10809,
                                 threads=1, hung_timeout=None)
    servers = _fake_server(monkeypatch)
    serve.run(_args("serve", "--socket", "/tmp/x.sock", "--size", "4K"))
    assert (servers[0].kw["socket"], servers[0].kw["size"]) == ("/tmp/x.sock", 4096)


@pytest.mark.parametrize("as_json", [False, True])
def test_serve_flushes_its_banner_with_the_uri_before_it_waits_on_the_server(monkeypatch, as_json):
    # a script reading `pybcache serve` through a pipe needs the URI while the server runs, not at its end
    import io
    import sys

    class Stream(io.StringIO):
        flushed = ""

        def flush(self):
            self.flushed = self.getvalue()
    out, err = Stream(), Stream()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    banners = []
    servers = _fake_server(monkeypatch)
    wait = _FakeServer.wait
    monkeypatch.setattr(_FakeServer, "wait", lambda self, timeout=None: banners.append(
        (err if as_json else out).flushed) or wait(self, timeout))
    assert serve.run(_args("serve", "--write-delay", "7.25s", *(["--json"] if as_json else []))) == 0
    assert servers and banners == [_SERVE_BANNER.replace("write delay 5 ms", "write delay 7250 ms")]


def test_serve_with_json_puts_the_banner_on_stderr_and_the_counters_as_json_on_stdout(monkeypatch, capsys, tmp_path):
    _fake_server(monkeypatch)
    path = tmp_path / "stats.json"
    assert serve.run(_args("serve", "--json", "--json-stats", str(path))) == 0
    out = capsys.readouterr()
    doc = {"config": {"sync": "page", "size": 10 << 30, "write_delay_ns": 5_000_000,
                      "uri": "nbd+unix:///?socket=/tmp/s"}, "model": _STATS}
    assert out.err == _SERVE_BANNER and json.loads(out.out) == doc
    assert path.read_text() == json.dumps(doc, indent=2) + "\n"


def test_serve_with_a_patch_names_it_its_reports_and_its_tracker_error(monkeypatch, capsys):
    patch = _patch(monkeypatch, serve)
    servers = _fake_server(monkeypatch, stats=dict(_STATS, patch_reports=3, tracker_error=-5))
    assert serve.run(_args("serve", "--sync", "fix.c", "--hung-timeout", "2")) == 0
    assert servers[0].kw["sync"] is patch and servers[0].kw["hung_timeout"] == 2.0
    out = capsys.readouterr().out
    assert out.startswith("pybcache serve: sync=v3 (/p/fix.c), ")
    assert out.endswith(_serve_table() + "\npatch: v3 (/p/fix.c); distinct kernel reports: 3; tracker error: -5\n")
    _fake_server(monkeypatch)
    serve.run(_args("serve", "--sync", "fix.c"))
    assert capsys.readouterr().out.endswith("; distinct kernel reports: 0; tracker error: none\n")


def test_serve_when_nbdkit_exits_by_itself_says_so_prints_the_counters_and_returns_1(monkeypatch, capsys):
    servers = _fake_server(monkeypatch, script=[None, 3])
    assert serve.run(_args("serve")) == 1
    assert servers[0].events[-1] == ("stop", signal.SIG_IGN, signal.SIG_IGN)
    out = capsys.readouterr()
    assert out.err == "pybcache serve: nbdkit exited by itself with status 3\n"
    assert out.out == _SERVE_BANNER + _serve_table() + "\n"


def test_serve_without_counters_from_nbdkit_says_so_and_returns_1(monkeypatch, capsys, tmp_path):
    _fake_server(monkeypatch, stats=None)
    assert serve.run(_args("serve", "--json-stats", str(tmp_path / "s.json"))) == 1
    out = capsys.readouterr()
    assert out.err == "pybcache serve: nbdkit wrote no counters\n" and "Counter" not in out.out
    assert not (tmp_path / "s.json").exists()


def test_serve_without_nbdkit_is_a_usage_error_and_a_failed_start_is_status_1(monkeypatch, capsys):
    from pybcache.bcache.nbd.server import ToolMissing
    servers = _fake_server(monkeypatch, start_exc=ToolMissing("nbdkit: not installed"))
    with pytest.raises(commands.UsageError) as err:
        serve.run(_args("serve"))
    assert str(err.value) == "nbdkit: not installed"
    assert servers[0].events[-1] == ("stop", signal.SIG_IGN, signal.SIG_IGN)   # cleaned up all the same
    capsys.readouterr()
    _fake_server(monkeypatch, start_exc=RuntimeError("nbdkit exited with status 1: bad plugin"))
    assert serve.run(_args("serve")) == 1
    out = capsys.readouterr()
    assert out.out == "" and out.err == "pybcache serve: error: nbdkit exited with status 1: bad plugin\n"


@pytest.mark.parametrize("argv, message", [
    (["--sync", "fast"], "--sync: unknown value 'fast' (allowed: none, global, page, atomic, or PATCH.c)"),
    (["--hung-timeout", "1"], "--hung-timeout: applies to a patch (--sync PATCH.c), not to the lab's trackers"),
    (["--size", "6K"], "--size: must be a multiple of 4K up to 1T, got '6K'"),
    (["--size", "ten"], "--size: 'ten' is not a size (use e.g. 512, 4K, 32M, 10G, 1T)"),
    (["--size", "1028G"], "--size: must be a multiple of 4K up to 1T, got '1028G'"),
    (["--write-delay", "later"], "--write-delay: 'later' is not a duration (use e.g. 0, 500us, 5ms, 1s)"),
])
def test_serve_refuses_bad_arguments_by_name_before_starting(monkeypatch, argv, message):
    servers = _fake_server(monkeypatch)
    with pytest.raises(commands.UsageError) as err:
        serve.run(_args("serve", *argv))
    assert str(err.value) == message and servers == []


def test_serve_takes_an_existing_file_as_a_patch_whatever_its_name(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(serve, "load_sync", lambda value, syncs: seen.append(value) or "page")
    _fake_server(monkeypatch)
    path = tmp_path / "patch.txt"
    path.write_text("")
    assert serve.run(_args("serve", "--sync", str(path))) == 0
    assert seen == [str(path)]


def test_a_stop_signal_raises_the_stop_naming_the_signal():
    with pytest.raises(serve._Stop) as err:
        serve._raise_stop(signal.SIGTERM, None)
    assert str(err.value) == "SIGTERM"
