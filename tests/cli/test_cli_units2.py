"""The ``run`` of the commands that start whole experiments (race, fio, fio over NBD, sweep, serve, report,
writeback), with the experiment stood in for, and every command's parser (issue #16, mutation testing).

Each ``run`` is called on the Namespace its own parser makes of an argument list, with the function it would
start (the native race, the fio mix, real fio, the Dask sweep, the NBD server, the report, the writeback
simulation) replaced by a stand-in that records what it was handed and returns small chosen figures: these tests
state what each command passes on, what it refuses (with which line, before anything runs), what it prints
(table, ``--json``) and how it reports its progress. The parser tests state each option's name, default, type
and choices, and that the help is true to the parser: a range or default it states is the one checked."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
from types import SimpleNamespace

import pytest

from pybcache import commands
from pybcache.commands import fio, fio_nbd, race, report, serve, sweep, writeback
from pybcache._console import format_table
from pybcache.bcache.nbd.fio import fio_table


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


# ------------------------------------------------------------------------------------------------ race.run


def _race_result(stale_reads=0, stale_cached=0, **cfg):
    config = dict(check="after", restart=True, granularity="chunk", alloc_failure="hijack",
                  fault_probability=0.0, threads=4, writers=2, write_delay_ns=1500)
    config.update(cfg)
    return {"config": config, "seconds": 1.234, "stale_reads": stale_reads, "stale_cached_blocks": stale_cached,
            "reads": 12345, "writes": 2345, "read_bypasses": 3, "cache_inserts": 4000, "miss_collisions": 5,
            "ops": 14690, "ops_per_s": 11904.4, "stale_reads_per_s": 0.25, "untracked_writes": 6, "underflows": 7,
            "faults_injected": 8, "tracker_checks": 9000, "check_key_restarts": 10,
            "kernel_reports": {"lockdep": 2, "kasan": 1}}


def _fake_race(monkeypatch, result=None, exc=None):
    import pybcache.bcache.cachedev
    calls = []

    def fake(**kw):
        calls.append(kw)
        kw["progress"](range(3), 3)
        if exc is not None:
            raise exc
        return result if result is not None else _race_result()
    monkeypatch.setattr(pybcache.bcache.cachedev, "race", fake)
    return calls


def _without_progress(kw):
    return {k: v for k, v in kw.items() if k != "progress"}


def test_race_hands_the_lab_defaults_to_the_stress(monkeypatch):
    calls = _fake_race(monkeypatch)
    assert race.run(_args("race")) == 0
    assert _without_progress(calls[0]) == dict(
        sync="page", check="after", restart=True, granularity="chunk", fault_probability=0.0, threads=2,
        writers=None, seconds=3.0, min_ops=0, seed=0, write_delay_ns=20_000, region_blocks=64, max_write_blocks=4,
        alloc_failure="hijack", chunk_size=4096, reclaim_every=0)


def test_race_hands_every_option_given_to_the_stress_in_its_units(monkeypatch):
    calls = _fake_race(monkeypatch)
    assert race.run(_args("race", "--sync", "atomic", "--check", "entry", "--no-restart", "--granularity", "page",
                          "--fault-probability", "0.5", "--threads", "8", "--writers", "7", "--seconds", "0.25",
                          "--min-ops", "100", "--seed", "7", "--write-delay-us", "1.5", "--region-blocks", "3",
                          "--chunk-size", "512", "--reclaim-every", "5", "--alloc-failure", "pool")) == 0
    assert _without_progress(calls[0]) == dict(
        sync="atomic", check="entry", restart=False, granularity="page", fault_probability=0.5, threads=8,
        writers=7, seconds=0.25, min_ops=100, seed=7, write_delay_ns=1500, region_blocks=3, max_write_blocks=3,
        alloc_failure="pool", chunk_size=512, reclaim_every=5)


@pytest.mark.parametrize("argv, message", [
    (["--chunk-size", "256"], "--chunk-size: must be a power of two >= 512, got '256'"),
    (["--chunk-size", "1536"], "--chunk-size: must be a power of two >= 512, got '1536'"),
    (["--chunk-size", "4Q"], "--chunk-size: '4Q' is not a size (use e.g. 512, 4K, 32M, 10G, 1T)"),
    (["--threads", "4", "--writers", "4"], "--writers: must be in [1, 3] (threads - 1), got 4"),
    (["--hung-timeout", "2"], "--hung-timeout: applies to a patch (--sync PATCH.c), not to the lab's trackers"),
])
def test_race_refuses_bad_lab_arguments_by_name_before_running(monkeypatch, argv, message):
    calls = _fake_race(monkeypatch)
    with pytest.raises(commands.UsageError) as err:
        race.run(_args("race", *argv))
    assert str(err.value) == message and calls == []


@pytest.mark.parametrize("option", [["--alloc-failure", "hijack"], ["--chunk-size", "4K"], ["--granularity", "page"],
                                    ["--reclaim-every", "1"]])
def test_race_with_a_patch_refuses_each_lab_only_option_by_name(monkeypatch, option):
    _patch(monkeypatch, race)
    calls = _fake_race(monkeypatch)
    with pytest.raises(commands.UsageError) as err:
        race.run(_args("race", "--sync", "fix.c", *option))
    name = " ".join(option) if option[0] == "--granularity" else option[0]
    assert str(err.value) == f"{name}: applies to the lab's trackers, not to a patch (--sync is the patch 'v3')"
    assert calls == []


def test_race_with_a_patch_takes_chunk_granularity_and_the_reclaim_off_and_passes_its_hung_timeout(monkeypatch):
    patch = _patch(monkeypatch, race)
    calls = _fake_race(monkeypatch)
    assert race.run(_args("race", "--sync", "fix.c", "--granularity", "chunk", "--reclaim-every", "0")) == 0
    assert calls[0]["sync"] is patch and calls[0]["hung_timeout"] is None
    assert not {"alloc_failure", "chunk_size", "reclaim_every"} & set(calls[0])
    calls.clear()
    race.run(_args("race", "--sync", "fix.c", "--hung-timeout", "2.5", "--threads", "3", "--writers", "2"))
    assert (calls[0]["hung_timeout"], calls[0]["threads"], calls[0]["writers"]) == (2.5, 3, 2)


def _race_table(res):
    rows = [["stale_reads", f"{res['stale_reads']:,}"], ["stale_cached_blocks", f"{res['stale_cached_blocks']:,}"],
            ["reads", "12,345"], ["writes", "2,345"], ["read_bypasses", "3"], ["cache_inserts", "4,000"],
            ["miss_collisions", "5"], ["ops", "14,690"], ["ops/s", "11,904"], ["stale reads/s", "0.2"],
            ["untracked_writes", "6"], ["underflows", "7"], ["faults_injected", "8"], ["tracker_checks", "9,000"],
            ["check_key_restarts", "10"]]
    return format_table(["metric", "value"], rows)


@pytest.mark.parametrize("stale_reads, stale_cached, verdict", [(0, 0, "no stale data"),
                                                                 (1234, 0, "STALE DATA SERVED"),
                                                                 (0, 1, "STALE DATA SERVED")])
def test_race_prints_its_config_the_counters_and_whether_stale_data_was_served(monkeypatch, capsys, stale_reads,
                                                                              stale_cached, verdict):
    res = _race_result(stale_reads, stale_cached)
    _fake_race(monkeypatch, res)
    assert race.run(_args("race", "--sync", "global")) == 0
    assert capsys.readouterr().out == (
        "race: sync=global check=after restart=on granularity=chunk alloc_failure=hijack fault_probability=0.0 "
        "threads=4 (writers 2) write delay 1.5 us (each write lands and ends on its writer's completion thread), "
        "1.23 s\n" + _race_table(res) + "\n" + verdict + "\n")


def test_race_with_a_patch_prints_no_alloc_failure_and_its_kernel_reports(monkeypatch, capsys):
    _patch(monkeypatch, race)
    res = _race_result(restart=False, granularity="chunk", alloc_failure="hijack")
    _fake_race(monkeypatch, res)
    assert race.run(_args("race", "--sync", "fix.c")) == 0
    assert capsys.readouterr().out == (
        "race: sync=v3 (/p/fix.c) check=after restart=OFF granularity=chunk alloc_failure=- fault_probability=0.0 "
        "threads=4 (writers 2) write delay 1.5 us (each write lands and ends on its writer's completion thread), "
        "1.23 s\n" + _race_table(res) + "\nkernel reports: kasan x1, lockdep x2\nno stale data\n")


def test_race_json_is_the_result_with_the_tracker_named(monkeypatch, capsys):
    _patch(monkeypatch, race)
    _fake_race(monkeypatch)
    assert race.run(_args("race", "--sync", "fix.c", "--json")) == 0
    assert json.loads(capsys.readouterr().out) == dict(_race_result(), sync="v3 (/p/fix.c)")


@pytest.mark.parametrize("exc", [ValueError("threads: bad\nthing"), TypeError("seed: not an int")])
def test_race_turns_the_stresss_refusal_into_a_usage_error(monkeypatch, exc):
    _fake_race(monkeypatch, exc=exc)
    with pytest.raises(commands.UsageError) as err:
        race.run(_args("race"))
    assert str(err.value) == str(exc)


@pytest.mark.parametrize("exc", [TimeoutError("start waited 10 s"), RuntimeError("the patch hung in write_end")])
def test_a_hung_or_failed_race_is_one_line_on_stderr_and_status_1(monkeypatch, capsys, exc):
    _fake_race(monkeypatch, exc=exc)
    assert race.run(_args("race")) == 1
    out = capsys.readouterr()
    assert out.out == "" and out.err == f"pybcache race: {exc}\n"


@pytest.mark.parametrize("as_json", [False, True])
def test_race_names_its_bar_and_keeps_quiet_with_json(monkeypatch, capsys, as_json):
    seen = _recording_progress(monkeypatch, race)
    _fake_race(monkeypatch)   # reports range(3) of 3
    race.run(_args("race", *(["--json"] if as_json else [])))
    assert seen == [([0, 1, 2], 3, "race", as_json)]


# ------------------------------------------------------------------------------------------------- fio.run


def _fio_row(variant, k, vs_none, fractions=True):
    return {"variant": variant, "ops_per_s": 100_000.4 * k, "ns_per_io": 1234.56 * k, "ns_per_io_vs_none": vs_none,
            "read_bypasses": 1000 * k, "bypass_fraction": 0.0125 * k if fractions else None,
            "cache_inserts": 2000 * k, "insert_fraction": 0.5 if fractions else None,
            "inserts_avoided": 0.25 * k if fractions else None, "stale_reads": 3 * k, "tracking_pages": 4 * k,
            "allocations_per_1000_writes": 1.234 * k}


def _fio_result(rows=None, patch=None, bounce=True):
    return {"config": {"size": 10 << 30, "chunks": 320, "bounce_copy": bounce, "jobs": 2, "read_percent": 70,
                       "inflight": 160, "seconds": 0.5, "rounds": 3, "granularity": "chunk", "free": "eager",
                       "patch": patch},
            "rows": rows if rows is not None else [_fio_row("none", 1, None), _fio_row("atomic", 2, 1.5)],
            "kernel_reports": {"kasan": 2}}


def _fake_fio(monkeypatch, result=None, exc=None):
    import pybcache.bcache.cachedev
    calls = []

    def fake(**kw):
        calls.append(kw)
        kw["progress"](range(2), 2)
        if exc is not None:
            raise exc
        return result if result is not None else _fio_result()
    monkeypatch.setattr(pybcache.bcache.cachedev, "fio", fake)
    return calls


def test_fio_hands_the_model_defaults_to_the_mix(monkeypatch):
    calls = _fake_fio(monkeypatch)
    assert fio.run(_args("fio")) == 0
    assert _without_progress(calls[0]) == dict(
        size=10 << 30, jobs=None, seconds=2.0, variants=["none", "global", "page", "atomic"], read_percent=70,
        inflight=160, bounce_copy=True, chunk_size=32 << 20, granularity="chunk", free="eager", seed=0, sync=None,
        hung_timeout=None)


def test_fio_hands_every_option_given_to_the_mix(monkeypatch):
    calls = _fake_fio(monkeypatch)
    assert fio.run(_args("fio", "--size", "1T", "--jobs", "3", "--seconds", "0.5", "--variants", "atomic, none",
                         "--read-percent", "0", "--inflight", "1", "--no-bounce-copy", "--chunk-size", "512",
                         "--granularity", "page", "--free", "deferred", "--seed", "9")) == 0
    assert _without_progress(calls[0]) == dict(
        size=1 << 40, jobs=3, seconds=0.5, variants=["atomic", "none"], read_percent=0, inflight=1,
        bounce_copy=False, chunk_size=512, granularity="page", free="deferred", seed=9, sync=None, hung_timeout=None)


@pytest.mark.parametrize("argv, message", [
    (["--size", "1025G"], "--size: at most 1T (the model keeps 24 bytes per 4 KiB block), got '1025G'"),
    (["--size", "ten"], "--size: 'ten' is not a size (use e.g. 512, 4K, 32M, 10G, 1T)"),
    (["--chunk-size", "256"], "--chunk-size: must be a power of two >= 512, got '256'"),
    (["--chunk-size", "48K"], "--chunk-size: must be a power of two >= 512, got '48K'"),
    (["--chunk-size", "4Q"], "--chunk-size: '4Q' is not a size (use e.g. 512, 4K, 32M, 10G, 1T)"),
    (["--sync", "/nonexistent/fix.c"],   # fio's --sync is a patch only: no variant name is taken for one
     "--sync /nonexistent/fix.c: path: cannot read the patch '/nonexistent/fix.c': No such file or directory"),
    (["--variants", "page,fast"], "--variants: unknown value 'fast' (allowed: none, global, page, atomic)"),
    (["--hung-timeout", "1"], "--hung-timeout: only with --sync PATCH.c"),
    (["--engine", "nbd", "--sync", "fix.c"],
     "--sync: only with --engine model (serve a patch with `pybcache serve --sync`)"),
    (["--engine", "nbd", "--hung-timeout", "1"],
     "--sync: only with --engine model (serve a patch with `pybcache serve --sync`)"),
])
def test_fio_refuses_bad_arguments_by_name_before_running(monkeypatch, argv, message):
    calls = _fake_fio(monkeypatch)
    nbd = []
    monkeypatch.setattr(fio_nbd, "run", lambda args: nbd.append(args) or 0)
    with pytest.raises(commands.UsageError) as err:
        fio.run(_args("fio", *argv))
    assert str(err.value) == message and calls == [] and nbd == []


def test_fio_with_the_nbd_engine_hands_its_arguments_to_fio_nbd(monkeypatch):
    calls = _fake_fio(monkeypatch)
    nbd = []
    monkeypatch.setattr(fio_nbd, "run", lambda args: nbd.append(args) or 7)
    args = _args("fio", "--engine", "nbd")
    assert fio.run(args) == 7
    assert nbd == [args] and calls == []


def test_fio_with_a_patch_measures_it_refuses_page_granularity_and_passes_its_hung_timeout(monkeypatch):
    patch = _patch(monkeypatch, fio)
    calls = _fake_fio(monkeypatch, _fio_result(patch="v3 (/p/fix.c)"))
    with pytest.raises(commands.UsageError) as err:
        fio.run(_args("fio", "--sync", "fix.c", "--granularity", "page"))
    assert str(err.value) == ("--granularity page: applies to the lab's trackers, not to a patch (--sync is the "
                              "patch 'v3')") and calls == []
    assert fio.run(_args("fio", "--sync", "fix.c", "--hung-timeout", "3")) == 0
    assert calls[0]["sync"] is patch and calls[0]["hung_timeout"] == 3.0


def _fio_table(bounce="on"):
    return format_table(
        ["Metric", "Unpatched", "Atomic"],
        [["Total ops/s", "100,000", "200,001"], [f"CPU ns per I/O (bounce {bounce})", "1234.6", "2469.1"],
         ["  vs unpatched", "-", "1.500x"], ["Read bypasses", "1,000 (1.2%)", "2,000 (2.5%)"],
         ["Cache inserts", "2,000 (50.0%)", "4,000 (50.0%)"], ["  inserts avoided", "25.0%", "50.0%"],
         ["Stale reads", "3", "6"], ["Tracking pages", "4", "8"],
         ["Page allocations per 1,000 writes", "1.23", "2.47"]])


_FIO_FOOTER = ("CPU is every thread's, completion threads included. Cache inserts are the share of reads that "
               "populate the cache (the v2 cover letter's NVMe util analogue).\n")


@pytest.mark.parametrize("bounce", ["on", "off"])
def test_fio_prints_its_config_one_column_per_variant_and_the_footer(monkeypatch, capsys, bounce):
    _fake_fio(monkeypatch, _fio_result(bounce=bounce == "on"))
    assert fio.run(_args("fio")) == 0
    assert capsys.readouterr().out == (
        f"fio (model): working set 10 GiB = 320 chunks, bounce copy {bounce}, 2 jobs, 70% 4 KiB reads / 128 KiB "
        "bypass writes, 160 writes in flight, 0.5 s per variant in 3 rounds, read check granularity chunk, page "
        "lifetime eager (assumed)\n" + _fio_table(bounce) + "\n" + _FIO_FOOTER)


def test_fio_shows_dashes_for_missing_fractions_and_labels_the_patch_column(monkeypatch, capsys):
    _patch(monkeypatch, fio)
    rows = [_fio_row("patch", 1, None, fractions=False)]
    _fake_fio(monkeypatch, _fio_result(rows, patch="v3 (/p/fix.c)"))
    assert fio.run(_args("fio", "--sync", "fix.c")) == 0
    out = capsys.readouterr().out.split("\n", 1)[1]
    assert out == format_table(
        ["Metric", "Patch"],
        [["Total ops/s", "100,000"], ["CPU ns per I/O (bounce on)", "1234.6"], ["  vs unpatched", "-"],
         ["Read bypasses", "1,000 (-)"], ["Cache inserts", "2,000 (-)"], ["  inserts avoided", "-"],
         ["Stale reads", "3"], ["Tracking pages", "4"], ["Page allocations per 1,000 writes", "1.23"]]) + "\n" + (
        "Patch: v3 (/p/fix.c); kernel reports: kasan x2. Its tracking pages and allocations count the patch's "
        "allocations, whatever their size.\n" + _FIO_FOOTER)


def test_fio_heads_a_column_it_has_no_label_for_with_the_variants_name(monkeypatch, capsys):
    _fake_fio(monkeypatch, _fio_result([_fio_row("none", 1, None), _fio_row("hybrid", 2, 1.5)]))
    assert fio.run(_args("fio")) == 0
    assert capsys.readouterr().out.splitlines()[1].split() == ["Metric", "Unpatched", "hybrid"]


def test_fio_json_is_the_result_with_the_patch_as_its_sync(monkeypatch, capsys):
    _fake_fio(monkeypatch, _fio_result(patch="v3 (/p/fix.c)"))
    assert fio.run(_args("fio", "--json")) == 0
    assert json.loads(capsys.readouterr().out) == dict(_fio_result(patch="v3 (/p/fix.c)"), sync="v3 (/p/fix.c)")


@pytest.mark.parametrize("exc", [ValueError("jobs: bad"), TypeError("seed: not an int")])
def test_fio_turns_the_mixs_refusal_into_a_usage_error(monkeypatch, exc):
    _fake_fio(monkeypatch, exc=exc)
    with pytest.raises(commands.UsageError) as err:
        fio.run(_args("fio"))
    assert str(err.value) == str(exc)


@pytest.mark.parametrize("exc", [TimeoutError("start waited 10 s"), RuntimeError("the patch hung")])
def test_a_hung_or_failed_fio_is_one_line_on_stderr_and_status_1(monkeypatch, capsys, exc):
    _fake_fio(monkeypatch, exc=exc)
    assert fio.run(_args("fio")) == 1
    out = capsys.readouterr()
    assert out.out == "" and out.err == f"pybcache fio: {exc}\n"


@pytest.mark.parametrize("as_json", [False, True])
def test_fio_names_its_bar_and_keeps_quiet_with_json(monkeypatch, capsys, as_json):
    seen = _recording_progress(monkeypatch, fio)
    _fake_fio(monkeypatch)
    fio.run(_args("fio", *(["--json"] if as_json else [])))
    assert seen == [([0, 1], 2, "fio", as_json)]


# ------------------------------------------------------------------------------------------------ fio_nbd.run


def _nbd_result():
    f = {"read_iops": 1000.0, "write_iops": 500.0, "read_lat_mean_ms": 1.0, "read_lat_p99_ms": 2.0,
         "write_lat_mean_ms": 3.0, "write_lat_p99_ms": 4.0}
    m = {"reads": 10, "cache_inserts": 5, "read_bypasses": 1, "stale_reads": 0, "stale_cached_blocks": 0}
    return {"config": {"size": 1 << 30, "iodepth": 32, "jobs": 2, "seconds": 1.5, "rounds": 3,
                       "write_delay_ns": 7_250_000_000},
            "rows": [{"variant": "none", "fio": f, "model": m}], "baseline": None}


def _fake_fio_nbd(monkeypatch, result=None, exc=None):
    import pybcache.bcache.nbd.fio
    calls = []

    def fake(**kw):
        calls.append(kw)
        kw["progress"](range(4), 4)
        if exc is not None:
            raise exc
        return result if result is not None else _nbd_result()
    monkeypatch.setattr(pybcache.bcache.nbd.fio, "fio_nbd", fake)
    return calls


def test_fio_nbd_hands_its_defaults_to_real_fio(monkeypatch):
    calls = _fake_fio_nbd(monkeypatch)
    assert fio.run(_args("fio", "--engine", "nbd")) == 0
    assert _without_progress(calls[0]) == dict(size=10 << 30, jobs=None, seconds=2.0,
                                               variants=["none", "global", "page", "atomic"],
                                               write_delay_ns=5_000_000, memory_baseline=False)


def test_fio_nbd_hands_every_option_given_to_real_fio(monkeypatch):
    calls = _fake_fio_nbd(monkeypatch)
    assert fio.run(_args("fio", "--engine", "nbd", "--size", "1T", "--jobs", "4", "--seconds", "1", "--variants",
                         "page,none", "--write-delay", "250us", "--memory-baseline")) == 0
    assert _without_progress(calls[0]) == dict(size=1 << 40, jobs=4, seconds=1.0, variants=["page", "none"],
                                               write_delay_ns=250_000, memory_baseline=True)


@pytest.mark.parametrize("argv, message", [
    (["--size", "2T"], "--size: must be a multiple of 128K up to 1T for --engine nbd, got '2T'"),
    (["--size", "192K"], "--size: must be a multiple of 128K up to 1T for --engine nbd, got '192K'"),
    (["--size", "ten"], "--size: 'ten' is not a size (use e.g. 512, 4K, 32M, 10G, 1T)"),
    (["--variants", "page,bogus"], "--variants: unknown value 'bogus' (allowed: none, global, page, atomic)"),
    (["--variants", "page,none,page"], "--variants: must not repeat, got 'page,none,page'"),
    (["--write-delay", "11s"], "--write-delay: must be in [0, 10s], got '11s'"),
    (["--write-delay", "soon"], "--write-delay: 'soon' is not a duration (use e.g. 0, 500us, 5ms, 1s)"),
])
def test_fio_nbd_refuses_bad_arguments_by_name_before_running(monkeypatch, argv, message):
    calls = _fake_fio_nbd(monkeypatch)
    with pytest.raises(commands.UsageError) as err:
        fio_nbd.run(_args("fio", "--engine", "nbd", *argv))
    assert str(err.value) == message and calls == []


def test_fio_nbd_without_fio_or_nbdkit_is_a_usage_error_with_the_install_line(monkeypatch):
    from pybcache.bcache.nbd.server import ToolMissing
    _fake_fio_nbd(monkeypatch, exc=ToolMissing("fio: not installed (apt-get install fio)"))
    with pytest.raises(commands.UsageError) as err:
        fio_nbd.run(_args("fio", "--engine", "nbd"))
    assert str(err.value) == "fio: not installed (apt-get install fio)"


def test_a_failed_fio_nbd_run_is_one_line_on_stderr_and_status_1(monkeypatch, capsys):
    _fake_fio_nbd(monkeypatch, exc=RuntimeError("nbdkit exited with status 1"))
    assert fio_nbd.run(_args("fio", "--engine", "nbd")) == 1
    out = capsys.readouterr()
    assert out.out == "" and out.err == "pybcache fio: error: nbdkit exited with status 1\n"


def test_fio_nbd_prints_its_config_the_posted_table_and_the_footer(monkeypatch, capsys):
    res = _nbd_result()
    _fake_fio_nbd(monkeypatch, res)
    assert fio_nbd.run(_args("fio", "--engine", "nbd")) == 0
    assert capsys.readouterr().out == (
        "fio (real fio, nbd engine, against `pybcache serve`): 1 GiB, rw=randrw, bs=4k,128k, iodepth=32, 2 jobs, "
        "1.5 s per variant in 3 rotating rounds, write delay 7250 ms\n" + fio_table(res) + "\n"
        "IOPS and latencies are fio's own; the counters are the served model's at quiescence. Cache inserts are "
        "the share of reads that populate the cache (the v2 cover letter's NVMe util analogue).\n")


@pytest.mark.parametrize("as_json", [False, True])
def test_fio_nbd_json_is_the_result_and_its_bar_keeps_quiet_with_json(monkeypatch, capsys, as_json):
    seen = _recording_progress(monkeypatch, fio_nbd)
    _fake_fio_nbd(monkeypatch)
    assert fio_nbd.run(_args("fio", "--engine", "nbd", *(["--json"] if as_json else []))) == 0
    assert seen == [([0, 1, 2, 3], 4, "fio nbd", as_json)]
    if as_json:
        assert json.loads(capsys.readouterr().out) == _nbd_result()


# ---------------------------------------------------------------------------------------------- sweep.run


def _summary_entry(command, params, figures, reps=2):
    return {"command": command, "params": params, "reps": reps, "figures": figures}


def _fig(mean, low=None, high=None):
    return {"mean": mean, "ci_low": low, "ci_high": high}


def _sweep_result(interval="t"):
    summary = [
        _summary_entry("race", {"threads": 2, "sync": "page"},
                       {"stale_reads": _fig(0.0), "ops_per_s": _fig(1234.5678, 1000.0, 1500.0),
                        "untracked_writes": _fig(1.0), "stale_cached_blocks": _fig(0.0),
                        "ignored": _fig(9.0)}),
        _summary_entry("race", {"threads": 4, "sync": "page"},
                       {"stale_reads": _fig(0.0), "ops_per_s": _fig(2000.0, 1900.0, 2100.0),
                        "untracked_writes": _fig(3.0)}),
        _summary_entry("explore", {"bounds": "1w1r"}, {"schedules": _fig(6.0), "violations": _fig(0.0)}, reps=1),
    ]
    return {"rows": [{"command": "race"}] * 5, "summary": summary, "cached": 2, "ran": 3, "interval": interval}


def _fake_sweep(monkeypatch, result=None, exc=None, available=True):
    import pybcache.dist.cluster
    import pybcache.dist.sweep
    seen = {"grids": [], "sweeps": [], "clients": [], "tables": [], "plots": []}
    client = object()

    def load_grid(path):
        seen["grids"].append(path)
        return {"race": [{"threads": 2}]}

    def fake_sweep(points, *, reps, out, client=None, progress):
        seen["sweeps"].append(dict(points=points, reps=reps, out=out, client=client))
        list(progress(iter(range(3)), 3))
        if exc is not None:
            raise exc
        return result if result is not None else _sweep_result()

    @contextlib.contextmanager
    def client_for(*, scheduler, workers, dashboard):
        seen["clients"].append((scheduler, workers, dashboard))
        yield client

    def write_tables(rows, out):
        seen["tables"].append((len(rows), out))
        return [os.path.join(out, "race.csv"), os.path.join(out, "race.parquet")]

    def write_plots(summary, out):
        seen["plots"].append((len(summary), out))
        return [os.path.join(out, "a.png"), os.path.join(out, "b.png")]
    monkeypatch.setattr(pybcache.dist.sweep, "load_grid", load_grid)
    monkeypatch.setattr(pybcache.dist.sweep, "sweep", fake_sweep)
    monkeypatch.setattr(pybcache.dist.sweep, "write_tables", write_tables)
    monkeypatch.setattr(pybcache.dist.sweep, "write_plots", write_plots)
    monkeypatch.setattr(pybcache.dist.cluster, "dask_available", lambda: available)
    monkeypatch.setattr(pybcache.dist.cluster, "client_for", client_for)
    return seen, client


def test_sweep_with_no_workers_runs_in_this_process_and_writes_tables_plots_and_the_summary(monkeypatch, tmp_path):
    seen, _ = _fake_sweep(monkeypatch)
    out = tmp_path / "new" / "dir"
    assert sweep.run(_args("sweep", "g.toml", "--workers", "0", "--reps", "3", "--out", str(out))) == 0
    assert seen["grids"] == ["g.toml"] and seen["clients"] == []
    assert seen["sweeps"] == [dict(points={"race": [{"threads": 2}]}, reps=3, out=str(out), client=None)]
    assert seen["tables"] == [(5, str(out))] and seen["plots"] == [(3, str(out))]
    assert (out / "summary.json").read_text() == json.dumps({"summary": _sweep_result()["summary"], "interval": "t"},
                                                            indent=1)


def test_sweep_makes_its_out_directory_absolute(monkeypatch, tmp_path):
    seen, _ = _fake_sweep(monkeypatch)
    monkeypatch.chdir(tmp_path)
    assert sweep.run(_args("sweep", "g.toml", "--workers", "0", "--no-plots")) == 0
    assert seen["sweeps"][0]["out"] == str(tmp_path / "sweep-out") and (tmp_path / "sweep-out").is_dir()
    assert seen["plots"] == []


@pytest.mark.parametrize("argv, client", [([], (None, None, False)),
                                          (["--workers", "3", "--dashboard"], (None, 3, True)),
                                          (["--scheduler", "tcp://h:1"], ("tcp://h:1", None, False))])
def test_sweep_on_dask_hands_its_client_the_scheduler_workers_and_dashboard(monkeypatch, tmp_path, argv, client):
    seen, the_client = _fake_sweep(monkeypatch)
    assert sweep.run(_args("sweep", "g.toml", "--out", str(tmp_path), *argv)) == 0
    assert seen["clients"] == [client]
    assert seen["sweeps"] == [dict(points={"race": [{"threads": 2}]}, reps=1, out=str(tmp_path), client=the_client)]


def test_sweep_refuses_workers_with_a_scheduler_before_running(monkeypatch, tmp_path):
    seen, _ = _fake_sweep(monkeypatch)
    with pytest.raises(commands.UsageError) as err:
        sweep.run(_args("sweep", "g.toml", "--out", str(tmp_path), "--scheduler", "tcp://h:1", "--workers", "2"))
    assert str(err.value) == "--workers: only for the embedded cluster, not with --scheduler"
    assert seen["sweeps"] == []


def test_sweep_refuses_an_out_it_cannot_create_naming_it_and_why(monkeypatch, tmp_path):
    seen, _ = _fake_sweep(monkeypatch)
    (tmp_path / "file").write_text("x")
    with pytest.raises(commands.UsageError) as err:
        sweep.run(_args("sweep", "g.toml", "--workers", "0", "--out", str(tmp_path / "file" / "sub")))
    assert str(err.value) == f"--out: cannot create {str(tmp_path / 'file' / 'sub')!r}: Not a directory"
    assert seen["sweeps"] == []


def test_sweep_without_dask_is_a_usage_error_naming_the_extra_and_the_way_round(monkeypatch, tmp_path):
    seen, _ = _fake_sweep(monkeypatch, available=False)
    with pytest.raises(commands.UsageError) as err:
        sweep.run(_args("sweep", "g.toml", "--out", str(tmp_path)))
    assert str(err.value) == ("dask.distributed is not installed: pip install 'pybcache[distributed]' "
                              "(or --workers 0 to run in this process)")
    assert seen["sweeps"] == [] and seen["clients"] == []


@pytest.mark.parametrize("exc", [ValueError("reps: bad"), TypeError("grid: not a table")])
def test_sweep_turns_a_refused_grid_into_a_usage_error(monkeypatch, tmp_path, exc):
    _fake_sweep(monkeypatch, exc=exc)
    with pytest.raises(commands.UsageError) as err:
        sweep.run(_args("sweep", "g.toml", "--workers", "0", "--out", str(tmp_path)))
    assert str(err.value) == str(exc)


@pytest.mark.parametrize("interval, text", [("t", "Student t"), ("normal", "normal approximation (scipy absent)")])
def test_sweep_prints_a_table_per_command_of_the_figures_that_move_with_their_intervals(monkeypatch, capsys,
                                                                                       tmp_path, interval, text):
    _fake_sweep(monkeypatch, _sweep_result(interval))
    assert sweep.run(_args("sweep", "g.toml", "--workers", "0", "--out", str(tmp_path))) == 0
    race_table = format_table(["threads", "sync", "reps", "ops_per_s", "untracked_writes"],
                              [["2", "page", 2, "1235 [1000, 1500]", "1"], ["4", "page", 2, "2000 [1900, 2100]", "3"]])
    explore_table = format_table(["bounds", "reps", "schedules", "violations"], [["1w1r", 1, "6", "0"]])
    assert capsys.readouterr().out == (
        f"sweep: 5 runs (3 ran, 2 from the cache in {tmp_path}), 95% interval: {text}\n"
        f"\n[race]\n{race_table}\n\n[explore]\n{explore_table}\n"
        f"\ntables: {tmp_path}/race.csv, {tmp_path}/race.parquet\nplots: 2 in {tmp_path}\n")


def test_sweep_shows_a_missing_figure_as_a_dash_and_at_most_four_figures(monkeypatch, capsys, tmp_path):
    figures = {n: _fig(1.0) for n in ("a.bypass_fraction", "b.bypass_fraction", "a.tracking_pages",
                                      "b.tracking_pages", "a.ns_per_io_vs_none")}
    res = _sweep_result()
    res["summary"] = [_summary_entry("fio", {"size": "1G"}, figures),
                      _summary_entry("fio", {"size": "2G"}, {"a.bypass_fraction": _fig(2.0)})]
    _fake_sweep(monkeypatch, res)
    assert sweep.run(_args("sweep", "g.toml", "--workers", "0", "--out", str(tmp_path), "--no-plots")) == 0
    out = capsys.readouterr().out
    # only a.bypass_fraction moves across the points: it alone is shown
    assert format_table(["size", "reps", "a.bypass_fraction"], [["1G", 2, "1"], ["2G", 2, "2"]]) in out
    res["summary"] = [_summary_entry("fio", {"size": "1G"}, figures),
                      _summary_entry("fio", {"size": "2G"}, {"a.bypass_fraction": _fig(1.0)})]
    sweep.run(_args("sweep", "g.toml", "--workers", "0", "--out", str(tmp_path), "--no-plots"))
    out = capsys.readouterr().out
    assert format_table(["size", "reps", "a.bypass_fraction", "b.bypass_fraction", "a.tracking_pages",
                         "b.tracking_pages"],
                        [["1G", 2, "1", "1", "1", "1"], ["2G", 2, "1", "-", "-", "-"]]) in out
    assert "plots:" not in out


def test_sweep_json_is_the_result_with_its_tables_and_plots_and_its_bar_keeps_quiet(monkeypatch, capsys, tmp_path):
    seen = _recording_progress(monkeypatch, sweep)
    _fake_sweep(monkeypatch)
    assert sweep.run(_args("sweep", "g.toml", "--workers", "0", "--out", str(tmp_path), "--json")) == 0
    assert json.loads(capsys.readouterr().out) == dict(
        _sweep_result(), tables=[f"{tmp_path}/race.csv", f"{tmp_path}/race.parquet"],
        plots=[f"{tmp_path}/a.png", f"{tmp_path}/b.png"])
    assert seen == [([0, 1, 2], 3, "sweep", True)]
    seen.clear()
    sweep.run(_args("sweep", "g.toml", "--workers", "0", "--out", str(tmp_path)))
    assert seen == [([0, 1, 2], 3, "sweep", False)]


# ---------------------------------------------------------------------------------------------- serve.run

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


# ---------------------------------------------------------------------------------------------- report.run


def _fake_report(monkeypatch, targets=None):
    import pybcache.report
    seen = {"calls": [], "bar": [], "postfixes": []}
    bar = SimpleNamespace(update=lambda n: seen["bar"].append(("update", n)),
                          set_postfix_str=lambda text: seen["postfixes"].append(text))

    @contextlib.contextmanager
    def status_bar(desc, *, total=None, quiet=False):
        seen["bar"].append((desc, total, quiet))
        yield bar

    def write_report(out, *, quick, seed, progress, step):
        seen["calls"].append(dict(out=out, quick=quick, seed=seed, step=step is bar.set_postfix_str))
        for name in ("memory", "bench", "fio"):
            progress(name)
            step(f"{name} step")
        return os.path.join(out, "report.md"), {
            "plots": ["a.png", "b.png", "c.png"], "timings": {"memory": 1.25, "bench": 20.0},
            "targets": targets if targets is not None else {}}
    monkeypatch.setattr(pybcache.report, "write_report", write_report)
    monkeypatch.setattr(report, "status_bar", status_bar)
    ticks = iter((10.0, 42.5))
    monkeypatch.setattr(report, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    return seen


def test_report_writes_into_out_with_its_seed_and_quick_and_prints_what_it_wrote(monkeypatch, capsys, tmp_path):
    from pybcache.report import SECTIONS
    out = tmp_path / "a" / "b"
    seen = _fake_report(monkeypatch, {"p99_bypass_ns": (99_960, True), "batch_pair_ratio": (1.5, False),
                                      "same_chunk": (2.25, None)})
    assert report.run(_args("report", "--out", str(out), "--quick", "--seed", "5")) == 0
    assert out.is_dir()
    assert seen["calls"] == [dict(out=str(out), quick=True, seed=5, step=True)]
    # the bar counts a section done when the next starts, and names the one running
    assert seen["bar"] == [("report", len(SECTIONS), False), ("update", 1), ("update", 1)]
    assert seen["postfixes"] == ["memory", "memory step", "bench", "bench step", "fio", "fio step"]
    assert capsys.readouterr().out == (
        f"wrote {out}/report.md and 3 plots in 32.5 s (memory 1.2 s, bench 20.0 s)\n"
        "  target p99_bypass_ns: 100.0 µs met\n  target batch_pair_ratio: 1.5x MISSED\n"
        "  target same_chunk: 2.25x inconclusive\n")


def test_report_defaults_to_report_seed_0_and_full_runs(monkeypatch, capsys, tmp_path):
    seen = _fake_report(monkeypatch)
    monkeypatch.chdir(tmp_path)
    assert report.run(_args("report")) == 0
    assert seen["calls"] == [dict(out="report", quick=False, seed=0, step=True)] and (tmp_path / "report").is_dir()


def test_report_refuses_an_out_that_is_a_file_cannot_be_made_or_is_not_writable(monkeypatch, tmp_path):
    seen = _fake_report(monkeypatch)
    (tmp_path / "f").write_text("")
    with pytest.raises(commands.UsageError) as err:
        report.run(_args("report", "--out", str(tmp_path / "f")))
    assert str(err.value) == f"--out: {str(tmp_path / 'f')!r} exists and is not a directory"
    with pytest.raises(commands.UsageError) as err:
        report.run(_args("report", "--out", str(tmp_path / "f" / "g")))
    assert str(err.value) == f"--out: cannot create {str(tmp_path / 'f' / 'g')!r}: Not a directory"
    checked = []
    monkeypatch.setattr(os, "access", lambda path, mode: checked.append((path, mode)) and False)
    with pytest.raises(commands.UsageError) as err:
        report.run(_args("report", "--out", str(tmp_path)))
    assert str(err.value) == f"--out: {str(tmp_path)!r} is not writable"
    assert checked == [(str(tmp_path), os.W_OK)] and seen["calls"] == []


# ------------------------------------------------------------------------------------------- writeback.run

_WB_KEYS = ("background_write_gib", "foreground_bandwidth_mib_s", "foreground_completion_s",
            "foreground_mean_latency_ms")


def _wb_flushes(k):
    return {"foreign_flushes_per_run": 10.0 * k, "pages_written_per_run": 512.0 * k, "pages_per_flush": 51.2,
            "mib_per_flush": 0.2, "pages_by_target_per_run": {"sdb": 256.0 * k},
            "background_file_gib_by_writer_per_run": {"periodic": 0.5 * k}, "throttle_events_per_run": 3.0 * k,
            "bdev_skipped_busy_per_run": 0.0}


def _wb_result():
    base = dict(zip(_WB_KEYS, (6.0, 150.0, 100.0, 200.0)))
    pat = dict(zip(_WB_KEYS, (2.0, 180.0, 90.0, 170.0)))
    change = dict(zip(_WB_KEYS, (-66.7, 20.0, -10.0, -15.0)))
    doc = {"baseline": base, "patched": pat, "flushes": {"baseline": _wb_flushes(1), "patched": _wb_flushes(2)}}
    return SimpleNamespace(baseline=base, patched=pat, change_percent=change, as_dict=lambda: dict(doc))


def _wb_churn(k):
    return SimpleNamespace(as_dict=lambda: {
        "device_incarnations": 3 + k, "flushes": 40 + k, "stale_flushes": 5 * k, "stale_pages": 100 * k,
        "skipped_absent": 1, "skipped_removed": 2, "skipped_closed": 6, "skipped_busy": 7, "release_delayed": 8,
        "release_delay_mean_s": 0.125, "release_delay_max_s": 2.5, "still_pinned_at_end": 9,
        "pinned_device_seconds": 12.34, "deferred_puts": 11})


def _fake_writeback(monkeypatch):
    import pybcache.writeback
    seen = {"runs": [], "churn": [], "sensitivity": []}

    def run_experiment(runs, seed, *, wrap):
        seen["runs"].append((runs, seed, list(wrap(iter(range(runs))))))
        return _wb_result()

    def compare_churn(*, seed):
        seen["churn"].append(seed)
        return {"bdev-devt": _wb_churn(1), "bdev-ref": _wb_churn(0)}

    def run_sensitivity(runs, seed, *, wrap):
        seen["sensitivity"].append((runs, seed, list(wrap(iter(range(2))))))
        row = {"name": "hz=1000", "verdict": "holds", "baseline": _wb_result().baseline,
               "patched": _wb_result().patched, "change_percent": _wb_result().change_percent}
        return SimpleNamespace(as_dict=lambda: {"rows": [row]}, summary="it holds")
    monkeypatch.setattr(pybcache.writeback, "run_experiment", run_experiment)
    monkeypatch.setattr(pybcache.writeback, "compare_churn", compare_churn)
    monkeypatch.setattr(pybcache.writeback, "run_sensitivity", run_sensitivity)
    monkeypatch.setattr(pybcache.writeback, "summary_text", lambda result: result.summary)
    monkeypatch.setattr(pybcache.writeback, "SENSITIVITY", ("a", "b", "c"))
    ticks = iter((100.0, 103.25))
    monkeypatch.setattr(writeback, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    return seen


def test_writeback_runs_three_runs_of_seed_0_and_prints_the_table_and_the_flushes(monkeypatch, capsys):
    seen = _fake_writeback(monkeypatch)
    assert writeback.run(_args("writeback")) == 0
    assert [r[:2] for r in seen["runs"]] == [(3, 0)] and seen["churn"] == [] and seen["sensitivity"] == []
    doc = _wb_result().as_dict()
    assert capsys.readouterr().out == (
        "memcg foreign-bdev writeback (v6): mean of 3 simulated run(s) per kernel, seed 0\n"
        "baseline = owner-wb foreign flushes (today), patched = bdev-mapping flushes (the series)\n\n"
        + format_table(["Metric", "Baseline", "Patched", "Change", "Posted change"], writeback._rows(_wb_result()))
        + "\n\n" + format_table(["Foreign flushes (per run)", "Baseline", "Patched"],
                                writeback._flush_rows(doc["flushes"]))
        + "\n\nwall time 3.2 s\n")


def test_writeback_with_churn_compares_the_two_records_on_the_same_seed(monkeypatch, capsys):
    seen = _fake_writeback(monkeypatch)
    assert writeback.run(_args("writeback", "--churn", "--runs", "2", "--seed", "9")) == 0
    assert [r[:2] for r in seen["runs"]] == [(2, 9)] and seen["churn"] == [9]
    out = capsys.readouterr().out
    churn = {"bdev-devt": _wb_churn(1).as_dict(), "bdev-ref": _wb_churn(0).as_dict()}
    assert out.startswith("memcg foreign-bdev writeback (v6): mean of 2 simulated run(s) per kernel, seed 9\n")
    assert out.endswith(
        "\n\ndev_t reuse churn (devices removed and re-created with the same dev_t):\n"
        + format_table(["Churn", "dev_t records (series)", "device references (reviewer)"],
                       writeback._churn_rows(churn)) + "\n\nwall time 3.2 s\n")


def test_writeback_json_is_the_result_with_the_churn_and_the_wall_time(monkeypatch, capsys):
    _fake_writeback(monkeypatch)
    assert writeback.run(_args("writeback", "--json", "--churn")) == 0
    churn = {"bdev-devt": _wb_churn(1).as_dict(), "bdev-ref": _wb_churn(0).as_dict()}
    assert json.loads(capsys.readouterr().out) == dict(_wb_result().as_dict(), churn=churn, wall_seconds=3.25)
    _fake_writeback(monkeypatch)
    writeback.run(_args("writeback", "--json"))
    assert "churn" not in json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("as_json", [False, True])
def test_writeback_counts_its_progress_in_runs_and_keeps_quiet_with_json(monkeypatch, capsys, as_json):
    bars = _recording_progress(monkeypatch, writeback)
    seen = _fake_writeback(monkeypatch)
    writeback.run(_args("writeback", "--runs", "4", *(["--json"] if as_json else [])))
    assert bars == [([0, 1, 2, 3], 4, "writeback runs", as_json)] and seen["runs"][0][2] == []


def test_writeback_sensitivity_runs_one_run_per_perturbation_and_prints_the_changes(monkeypatch, capsys):
    seen = _fake_writeback(monkeypatch)
    assert writeback.run(_args("writeback", "--sensitivity", "--seed", "4")) == 0
    assert [s[:2] for s in seen["sensitivity"]] == [(1, 4)] and seen["runs"] == []
    row = {"name": "hz=1000", "verdict": "holds", "baseline": _wb_result().baseline,
           "patched": _wb_result().patched, "change_percent": _wb_result().change_percent}
    assert capsys.readouterr().out == (
        "memcg foreign-bdev writeback (v6) sensitivity: 1 simulated run(s) per kernel and row, seed 4; "
        "change = patched vs baseline\n\n"
        + format_table(["Perturbation", "Background GiB base / patched", "Change", "Foreground MiB/s base / patched",
                        "Change", "Completion", "Latency", "Effect"], writeback._sensitivity_rows([row]))
        + "\n\nit holds\n\nwall time 3.2 s\n")


@pytest.mark.parametrize("as_json", [False, True])
def test_writeback_sensitivity_counts_its_progress_in_perturbations_and_its_json_has_the_wall_time(
        monkeypatch, capsys, as_json):
    bars = _recording_progress(monkeypatch, writeback)
    seen = _fake_writeback(monkeypatch)
    assert writeback.run(_args("writeback", "--sensitivity", "--runs", "2", *(["--json"] if as_json else []))) == 0
    assert bars == [([0, 1], 3, "sensitivity", as_json)] and seen["sensitivity"][0][:2] == (2, 0)
    if as_json:
        doc = json.loads(capsys.readouterr().out)
        assert doc["wall_seconds"] == 3.25 and doc["rows"][0]["name"] == "hz=1000"


# ---------------------------------------------------------------------------------------- every add_parser

_DEFAULTS = {
    "memory": dict(sizes="1T,10T,100T", json=False),
    "bench": dict(quick=False, json=False),
    "race": dict(sync="page", check="after", alloc_failure=None, no_restart=False, granularity=None,
                 fault_probability=0.0, threads=2, writers=None, seconds=3.0, min_ops=0, seed=0, write_delay_us=20.0,
                 region_blocks=64, chunk_size=None, reclaim_every=0, hung_timeout=None, write_kind="bypass",
                 cache_alloc_fail=0.0, track="bypass", json=False),
    "explore": dict(sync="page", check="after", alloc_failure=None, no_restart=False, granularity=None, fault_at=0,
                    bounds=[(1, 1), (2, 1), (1, 2)], reclaims=None, overflow=None, counter_bits=None,
                    counter_max=None, preload=None, max_restarts=3, no_reduce=False, max_schedules=0, scenario=None,
                    distributed=False, scheduler=None, workers=None, tasks_per_worker=16, hung_timeout=None,
                    write_kind="bypass", cache_alloc_fail=0, track="bypass", json=False),
    "fio": dict(size="10G", jobs=None, seconds=2.0, variants="none,global,page,atomic", read_percent=70,
                inflight=160, no_bounce_copy=False, chunk_size="32M", granularity="chunk", free="eager", seed=0,
                sync=None, hung_timeout=None, json=False, engine="model", write_delay="5ms", memory_baseline=False),
    "writeback": dict(runs=None, seed=0, churn=False, sensitivity=False, json=False),
    "report": dict(out="report", quick=False, seed=0),
    "serve": dict(sync="page", hung_timeout=None, size="10G", write_delay="5ms", socket=None, port=None, threads=64,
                  json_stats=None, json=False),
    "sweep": dict(grid="g.toml", reps=1, out="sweep-out", scheduler=None, workers=None, dashboard=False,
                  no_plots=False, json=False),
    "check-patch": dict(file="fix.c", seconds=2.0, tsan=False, json=False),
    "kernel": dict(action="race", name=None, patch=None, no_debug=False, jobs=None, tries=None, write_delay=None,
                   fail_alloc=None, seconds=None, writers=None, readers=None, keep=False, json=False),
}
_POSITIONAL = {"sweep": ["g.toml"], "check-patch": ["fix.c"], "kernel": ["race"]}


def _module(command):
    import importlib
    return importlib.import_module(f"pybcache.commands.{commands.COMMANDS[command]}")


def _subparsers():
    parser = commands.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return parser, sub


@pytest.mark.parametrize("command", sorted(_DEFAULTS))
def test_each_command_parses_no_options_to_its_defaults_and_runs_its_own_run(command):
    assert set(_DEFAULTS) == set(commands.COMMANDS)
    args = vars(_args(command, *_POSITIONAL.get(command, [])))
    assert args.pop("command") == command and args.pop("func") is _module(command).run
    assert args == _DEFAULTS[command]
    assert all(type(args[k]) is type(v) for k, v in _DEFAULTS[command].items())   # 3.0, not 3


@pytest.mark.parametrize("command, argv, changed", [
    ("memory", ["--sizes", "1K", "--json"], dict(sizes="1K", json=True)),
    ("bench", ["--quick", "--json"], dict(quick=True, json=True)),
    ("race", ["--sync", "none", "--check", "miss", "--alloc-failure", "untracked", "--no-restart", "--granularity",
              "page", "--fault-probability", "0.25", "--threads", "9", "--writers", "3", "--seconds", "1",
              "--min-ops", "12", "--seed", "5", "--write-delay-us", "7", "--region-blocks", "8", "--chunk-size", "8K",
              "--reclaim-every", "2", "--hung-timeout", "4", "--json"],
     dict(sync="none", check="miss", alloc_failure="untracked", no_restart=True, granularity="page",
          fault_probability=0.25, threads=9, writers=3, seconds=1.0, min_ops=12, seed=5, write_delay_us=7.0,
          region_blocks=8, chunk_size="8K", reclaim_every=2, hung_timeout=4.0, json=True)),
    ("explore", ["--sync", "atomic", "--check", "entry", "--alloc-failure", "pool", "--no-restart", "--granularity",
                 "chunk", "--fault-at", "2", "--bounds", "2w2r", "--reclaims", "1", "--overflow", "clamp",
                 "--counter-bits", "32", "--counter-max", "5", "--preload", "6", "--max-restarts", "0", "--no-reduce",
                 "--max-schedules", "7", "--scenario", "3w1r", "--distributed", "--scheduler", "tcp://h:1",
                 "--workers", "2", "--tasks-per-worker", "3", "--hung-timeout", "0.5", "--json"],
     dict(sync="atomic", check="entry", alloc_failure="pool", no_restart=True, granularity="chunk", fault_at=2,
          bounds=[(2, 2)], reclaims=1, overflow="clamp", counter_bits=32, counter_max=5, preload=6, max_restarts=0,
          no_reduce=True, max_schedules=7, scenario="3w1r", distributed=True, scheduler="tcp://h:1", workers=2,
          tasks_per_worker=3, hung_timeout=0.5, json=True)),
    ("fio", ["--size", "1G", "--jobs", "2", "--seconds", "3", "--variants", "page", "--read-percent", "50",
             "--inflight", "8", "--no-bounce-copy", "--chunk-size", "4K", "--granularity", "page", "--free",
             "deferred", "--seed", "3", "--sync", "fix.c", "--hung-timeout", "1", "--json", "--engine", "nbd",
             "--write-delay", "1ms", "--memory-baseline"],
     dict(size="1G", jobs=2, seconds=3.0, variants="page", read_percent=50, inflight=8, no_bounce_copy=True,
          chunk_size="4K", granularity="page", free="deferred", seed=3, sync="fix.c", hung_timeout=1.0, json=True,
          engine="nbd", write_delay="1ms", memory_baseline=True)),
    ("writeback", ["--runs", "2", "--seed", "4", "--churn", "--json"], dict(runs=2, seed=4, churn=True, json=True)),
    ("writeback", ["--sensitivity"], dict(sensitivity=True)),
    ("report", ["--out", "r", "--quick", "--seed", "2"], dict(out="r", quick=True, seed=2)),
    ("serve", ["--sync", "global", "--hung-timeout", "3", "--size", "4K", "--write-delay", "0", "--port", "9",
               "--threads", "2", "--json-stats", "s.json", "--json"],
     dict(sync="global", hung_timeout=3.0, size="4K", write_delay="0", port=9, threads=2, json_stats="s.json",
          json=True)),
    ("serve", ["--socket", "/tmp/s"], dict(socket="/tmp/s")),
    ("sweep", ["--reps", "2", "--out", "o", "--scheduler", "tcp://h:2", "--workers", "0", "--dashboard",
               "--no-plots", "--json"],
     dict(reps=2, out="o", scheduler="tcp://h:2", workers=0, dashboard=True, no_plots=True, json=True)),
    ("check-patch", ["--seconds", "0.5", "--tsan", "--json"], dict(seconds=0.5, tsan=True, json=True)),
])
def test_each_option_given_lands_in_its_own_field_with_its_type(command, argv, changed):
    args = vars(_args(command, *_POSITIONAL.get(command, []), *argv))
    want = dict(_DEFAULTS[command], **changed)
    assert {k: args[k] for k in want} == want
    assert all(type(args[k]) is type(v) for k, v in changed.items())


_CHOICES = [
    ("race", "--check", ("entry", "miss", "after", "read-done", "before")),
    ("race", "--alloc-failure", ("untracked", "hijack", "pool")),
    ("race", "--granularity", ("chunk", "page")),
    ("explore", "--check", ("entry", "miss", "after", "read-done", "before")),
    ("explore", "--alloc-failure", ("untracked", "hijack", "pool")), ("explore", "--granularity", ("chunk", "page")),
    ("explore", "--overflow", ("wrap", "clamp", "wait")), ("explore", "--counter-bits", ("16", "32", "64")),
    ("explore", "--scenario", ("1w1r", "2w1r", "1w2r", "2w2r", "3w1r")), ("fio", "--granularity", ("chunk", "page")),
    ("fio", "--free", ("eager", "deferred")), ("fio", "--engine", ("model", "nbd")),
]


def _refused(capsys, *argv):
    with pytest.raises(SystemExit) as ex:
        _args(*argv)
    err = capsys.readouterr().err
    assert ex.value.code == 2 and len(err.splitlines()) == 1
    return err


@pytest.mark.parametrize("command, option, choices", _CHOICES)
def test_a_choice_option_takes_each_of_its_choices_and_nothing_else(capsys, command, option, choices):
    dest = option[2:].replace("-", "_")
    for choice in choices:
        value = getattr(_args(command, option, choice), dest)
        assert str(value) == choice
    bogus = "8" if choices[0].isdigit() else "bogus"
    err = _refused(capsys, command, option, bogus)
    assert f"argument {option}: invalid choice: " in err and bogus in err


# (command, option, low, high, kind): the range each number option accepts, as its errors and help state it
_RANGES = [
    ("race", "--fault-probability", 0.0, 1.0, "closed"), ("race", "--threads", 2, 256, "int"),
    ("race", "--cache-alloc-fail", 0.0, 1.0, "closed"), ("explore", "--cache-alloc-fail", 0, 1 << 62, "int"),
    ("race", "--writers", 1, 255, "int"), ("race", "--seconds", 0.0, 3600.0, "open"),
    ("race", "--min-ops", 0, 10 ** 12, "int"), ("race", "--seed", 0, 2 ** 63 - 1, "int"),
    ("race", "--write-delay-us", 0.0, 1e6, "closed"), ("race", "--region-blocks", 1, 1 << 20, "int"),
    ("race", "--reclaim-every", 0, 1 << 40, "int"), ("race", "--hung-timeout", 0.0, 3600.0, "open"),
    ("explore", "--fault-at", 0, 1 << 62, "int"), ("explore", "--reclaims", 0, 4, "int"),
    ("explore", "--counter-max", 1, 1 << 62, "int"), ("explore", "--preload", 0, (1 << 32) - 1, "int"),
    ("explore", "--max-restarts", 0, 16, "int"), ("explore", "--max-schedules", 0, 1 << 62, "int"),
    ("explore", "--workers", 1, 256, "int"), ("explore", "--tasks-per-worker", 1, 1024, "int"),
    ("explore", "--hung-timeout", 0.0, 3600.0, "open"),
    ("fio", "--jobs", 1, 256, "int"), ("fio", "--seconds", 0, 3600, "open"),
    ("fio", "--read-percent", 0, 100, "int"), ("fio", "--inflight", 1, 1 << 20, "int"),
    ("fio", "--seed", 0, 2 ** 63 - 1, "int"), ("fio", "--hung-timeout", 0.0, 3600.0, "open"),
    ("writeback", "--runs", 1, 1000, "int"), ("writeback", "--seed", 0, (1 << 48) - 1, "int"),
    ("report", "--seed", 0, (1 << 48) - 1, "int"),
    ("serve", "--hung-timeout", 0.0, 3600.0, "open"), ("serve", "--port", 1, 65535, "int"),
    ("serve", "--threads", 1, 1024, "int"),
    ("sweep", "--reps", 1, 10_000, "int"), ("sweep", "--workers", 0, 256, "int"),
    ("check-patch", "--seconds", 0.0, 600.0, "open"),
    ("kernel", "--jobs", 1, 64, "int"), ("kernel", "--tries", 1, 1000, "int"),
    ("kernel", "--seconds", 1, 600, "int"),
    ("kernel", "--writers", 1, 16, "int"), ("kernel", "--readers", 1, 16, "int"),
]


def _number_cases(lo, hi, kind):
    """(accepted, refused) values at and just past each end of the range."""
    if kind == "int":
        return [lo, hi], [lo - 1, hi + 1]
    step = (hi - lo) / 7200
    accepted = [hi, lo + step] + ([] if kind == "open" else [lo])
    return accepted, [lo - step, hi + step] + ([lo] if kind == "open" else [])


@pytest.mark.parametrize("command, option, lo, hi, kind", _RANGES)
def test_a_number_option_takes_its_range_ends_and_refuses_just_past_them_naming_the_range(capsys, command, option,
                                                                                        lo, hi, kind):
    dest = option[2:].replace("-", "_")
    pos = _POSITIONAL.get(command, [])
    accepted, refused = _number_cases(lo, hi, kind)
    for value in accepted:
        got = getattr(_args(command, *pos, option, repr(value)), dest)
        assert got == value and type(got) is (int if kind == "int" else float)
    for value in refused:
        err = _refused(capsys, command, *pos, option, repr(value))
        assert f"argument {option}: must be in " in err
        assert f"{'(' if kind == 'open' else '['}{lo}, {hi}]" in err
    if kind == "int":
        assert "expected an integer" in _refused(capsys, command, *pos, option, "1.5")


def test_the_range_table_covers_every_number_option():
    _, sub = _subparsers()
    numbers = {(command, a.option_strings[0]) for command, p in sub.choices.items() for a in p._actions
               if a.type is not None and getattr(a.type, "__qualname__", "").startswith(("int_arg", "float_arg"))}
    assert numbers == {(c, o) for c, o, *_ in _RANGES}


@pytest.mark.parametrize("command, first, second", [("serve", ["--socket", "/tmp/s"], ["--port", "9"]),
                                                    ("writeback", ["--churn"], ["--sensitivity"])])
def test_exclusive_options_refuse_each_other(capsys, command, first, second):
    err = _refused(capsys, command, *first, *second)
    assert f"argument {second[0]}: not allowed with argument {first[0]}" in err


def _options():
    _, sub = _subparsers()
    for command, p in sub.choices.items():
        for a in p._actions:
            if not isinstance(a, argparse._HelpAction):
                yield command, a


def test_every_command_is_listed_with_a_help_line_and_has_a_description():
    parser, sub = _subparsers()
    listed = {c.dest: c.help for c in sub._choices_actions}
    assert set(listed) == set(commands.COMMANDS) and all(listed.values())
    for command, p in sub.choices.items():
        assert p.description and p.prog == f"pybcache {command}"
        assert p.format_help()   # every help text formats (a stray % would raise)


def test_every_option_has_a_help_text():
    assert all(a.help for _, a in _options())


def test_a_help_that_states_a_default_states_the_parsed_one_and_every_set_default_is_stated():
    for command, a in _options():
        if a.default in (None, False):
            continue
        # stated as "(default X)", "X (default)", or for --variants as the set it is a subset of
        assert "default" in a.help or f"subset of {a.default}" in a.help, (command, a.dest, a.help)
        m = re.search(r"\(default ([^;:)]+?)(?: = [^;)]*)?(?:[;)]|, )", a.help)
        if m is None or not isinstance(a.default, (int, float, str)):
            continue
        stated = m.group(1).removeprefix("./")
        assert (float(stated) == a.default) if isinstance(a.default, (int, float)) else stated == a.default, (
            command, a.dest, a.help)


def test_a_help_that_states_a_range_states_the_one_checked():
    for command, a in _options():
        m = re.search(r"(?<![\w.])(\d+(?:\.\d+)?)\.\.(\d+(?:\.\d+)?)\b", a.help or "")
        if m is None:
            continue
        pos = _POSITIONAL.get(command, [])
        lo, hi = (float(g) if "." in g else int(g) for g in m.groups())
        flag = a.option_strings[0]
        dest = a.dest
        assert getattr(_args(command, *pos, flag, str(lo)), dest) == lo
        assert getattr(_args(command, *pos, flag, str(hi)), dest) == hi
        for past in (hi + 1, lo - 1):
            try:
                _args(command, *pos, flag, str(past))
            except SystemExit:
                continue
            # taken only where the help says what that value does (sweep --workers: "0 runs every task ...")
            assert re.search(rf"; {past} \w", a.help), (command, flag, past, a.help)


def _documented_synopses():
    """(command, [options with their value words]) from docs/cachedev.md's hand-written synopses (docs/cli.md, the
    parsers' own reference, is checked by tests/docs/test_cli_reference.py)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    doc = open(os.path.join(root, "docs", "cachedev.md"), encoding="utf-8").read()
    block = doc.split("## Command line\n\n```\n", 1)[1].split("```", 1)[0]
    lines = [s.replace("\n", " ") for s in re.split(r"\npybcache ", "\n" + block) if s.strip()]
    for line in lines:
        command = line.split()[0]
        yield command, re.findall(r"(--[a-z][a-z-]*)(?: ([^\s\[\]]+))?", line)


def test_the_documented_synopses_name_real_options_metavars_and_values():
    _, sub = _subparsers()
    seen = set()
    for command, options in _documented_synopses():
        actions = {s: a for a in sub.choices[command]._actions for s in a.option_strings}
        pos = _POSITIONAL.get(command, [])
        for option, word in options:
            assert option in actions, (command, option)
            if not word or word in ("...", "|"):
                continue
            if re.fullmatch(r"[A-Z][A-Z0-9]*(\|[A-Z][A-Za-z0-9.]*)*|[A-Z]+\.c", word):
                assert actions[option].metavar == word, (command, option, word)
                seen.add((command, option))
            else:   # an example value, or the choices joined by |: each one parses
                for value in word.split("|"):
                    _args(command, *pos, option, value)
    assert len(seen) >= 15   # race, explore and fio: 19 option metavars today


def test_an_option_several_commands_share_names_its_value_alike_in_each_and_in_capitals():
    metavars = {}
    for command, a in _options():
        if a.option_strings and a.nargs != 0:
            shown = a.metavar if a.metavar is not None else None if a.choices else a.dest.upper()   # as argparse
            assert shown is None or shown == shown.upper().replace(".C", ".c"), (command, a.option_strings)
            metavars.setdefault(a.option_strings[0], {})[command] = shown
    shared = {option: set(by.values()) for option, by in metavars.items() if len(by) > 1}
    # fio's --sync takes only a patch (its variants are --variants); everywhere else a variant or a patch
    assert shared.pop("--sync") == {"VARIANT|PATCH.c", "PATCH.c"} and metavars["--sync"]["fio"] == "PATCH.c"
    # the race's writethrough failures are a probability, the explorer's the K-th allocation
    assert shared.pop("--cache-alloc-fail") == {"P", "K"} and metavars["--cache-alloc-fail"]["explore"] == "K"
    assert shared == {"--check": {None}, "--alloc-failure": {None}, "--granularity": {None}, "--writes": {None},
                      "--track": {None}} | {
        o: {m} for o, m in (("--seconds", "S"), ("--hung-timeout", "S"), ("--seed", "N"), ("--threads", "N"),
                            ("--workers", "N"), ("--scheduler", "ADDR"), ("--out", "DIR"), ("--size", "SIZE"),
                            ("--chunk-size", "SIZE"), ("--write-delay", "TIME"), ("--writers", "N"),
                            ("--jobs", "N"))}


def test_every_commands_json_flag_is_described_alike():
    # serve's adds where its banner goes; report has none (it writes report.json beside report.md)
    helps = {command: a.help for command, a in _options() if a.option_strings == ["--json"]}
    assert set(helps) == set(commands.COMMANDS) - {"report"}
    assert helps.pop("serve").startswith("print the final counters as JSON") and len(set(helps.values())) == 1


def test_fios_sync_takes_a_patch_file_and_no_variant_name(capsys, tmp_path, monkeypatch):
    # fio measures the variants by --variants; --sync adds a patch's column, so a variant's name is refused
    monkeypatch.chdir(tmp_path)  # (an existing file is taken for a patch: none named "page" here)
    err = _refused(capsys, "fio", "--sync", "page")
    assert "argument --sync: expected a kernel patch's .c file, got 'page'" in err
    path = tmp_path / "patch"
    path.write_text("")
    assert _args("fio", "--sync", str(path)).sync == str(path) and _args("fio", "--sync", "x.c").sync == "x.c"
