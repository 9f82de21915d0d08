"""``pybcache fio`` (``pybcache/commands/fio.py``) and its NBD engine (``pybcache/commands/fio_nbd.py``, the posted
table). The experiment it starts is stood in for (no subprocess, no C model): these tests state what the command
hands on, prints, writes as JSON and returns for given arguments and results."""
from __future__ import annotations

import json

import pytest

from pybcache import commands
from pybcache.commands import fio, fio_nbd
from pybcache._console import format_table
from pybcache.bcache.nbd.fio import fio_table

from helpers.command_stand_ins import _args, _patch, _recording_progress, _without_progress


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
        hung_timeout=None, write_kind="bypass", cache_alloc_fail=0.0, track=["bypass"])


def test_fio_hands_every_option_given_to_the_mix(monkeypatch):
    calls = _fake_fio(monkeypatch)
    assert fio.run(_args("fio", "--size", "1T", "--jobs", "3", "--seconds", "0.5", "--variants", "atomic, none",
                         "--read-percent", "0", "--inflight", "1", "--no-bounce-copy", "--chunk-size", "512",
                         "--granularity", "page", "--free", "deferred", "--seed", "9", "--writes", "mixed",
                         "--cache-alloc-fail", "0.25", "--track", "all, bypass")) == 0
    assert _without_progress(calls[0]) == dict(
        size=1 << 40, jobs=3, seconds=0.5, variants=["atomic", "none"], read_percent=0, inflight=1,
        bounce_copy=False, chunk_size=512, granularity="page", free="deferred", seed=9, sync=None, hung_timeout=None,
        write_kind="mixed", cache_alloc_fail=0.25, track=["all", "bypass"])


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
    (["--track", "bypass,some"], "--track: unknown value 'some' (allowed: bypass, invalidations, all)"),
    (["--track", ","], "--track: expected a comma-separated list from bypass, invalidations, all"),
    (["--cache-alloc-fail", "0.5"],
     "--cache-alloc-fail: applies to writethrough writes (--writes writethrough or mixed), got --writes bypass"),
    (["--cache-alloc-fail", "0.5", "--writes", "discard"],
     "--cache-alloc-fail: applies to writethrough writes (--writes writethrough or mixed), got --writes discard"),
    (["--engine", "nbd", "--writes", "mixed"], "--writes: only with --engine model"),
    (["--engine", "nbd", "--cache-alloc-fail", "0.1"], "--cache-alloc-fail: only with --engine model"),
    (["--engine", "nbd", "--track", "all"], "--track: only with --engine model"),
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


def _fio(read, write, lat):
    return {"read_iops": read, "write_iops": write, "read_lat_mean_ms": lat, "read_lat_p99_ms": lat * 4,
            "write_lat_mean_ms": lat * 2, "write_lat_p99_ms": lat * 8}


def _nbd_row(variant, read, write, lat, reads, inserts, stale=0):
    return {"variant": variant, "fio": _fio(read, write, lat),
            "model": {"read_bypasses": 1234 * (stale + 1), "cache_inserts": inserts, "reads": reads,
                      "stale_reads": stale, "stale_cached_blocks": 2 * stale}}


_NBD_METRICS = ["Read IOPS", "Write IOPS", "Total IOPS", "  vs unpatched", "Avg R Lat", "p99 R Lat", "Avg W Lat",
                "p99 W Lat"]


def test_the_nbd_table_has_one_column_per_variant_and_compares_each_to_unpatched_and_nbdkit_memory():
    res = {"rows": [_nbd_row("none", 3000.4, 1000.4, 0.5, 4000, 1000),
                    _nbd_row("atomic", 1500, 500, 1.25, 2000, 0, stale=3)],
           "baseline": {"fio": _fio(6000, 2000, 0.125)}}
    body = [
        ["Read IOPS", "3,000", "1,500", "6,000"],
        ["Write IOPS", "1,000", "500", "2,000"],
        ["Total IOPS", "4,001", "2,000", "8,000"],
        ["  vs unpatched", "1.000x", "0.500x", "2.000x"],
        ["Avg R Lat", "0.50 ms", "1.25 ms", "0.12 ms"],
        ["p99 R Lat", "2.00 ms", "5.00 ms", "0.50 ms"],
        ["Avg W Lat", "1.00 ms", "2.50 ms", "0.25 ms"],
        ["p99 W Lat", "4.00 ms", "10.00 ms", "1.00 ms"],
        ["  vs nbdkit memory", "0.500x", "0.250x", "1.000x"],
        ["Read bypasses", "1,234", "4,936", ""],
        ["Cache inserts", "1,000 (25.0%)", "0 (0.0%)", ""],
        ["Stale reads", "0", "3", ""],
        ["Stale cached blocks", "0", "6", ""],
    ]
    assert fio_table(res) == format_table(["Metric", "Unpatched", "Atomic", "nbdkit memory"], body)


def test_the_nbd_table_without_unpatched_or_baseline_or_reads_shows_dashes_and_no_share():
    res = {"rows": [_nbd_row("page", 10, 0, 1.0, 0, 0), _nbd_row("global", 0, 0, 1.0, 5, 1)], "baseline": None}
    body = [
        ["Read IOPS", "10", "0"],
        ["Write IOPS", "0", "0"],
        ["Total IOPS", "10", "0"],
        ["  vs unpatched", "-", "-"],
        ["Avg R Lat", "1.00 ms", "1.00 ms"],
        ["p99 R Lat", "4.00 ms", "4.00 ms"],
        ["Avg W Lat", "2.00 ms", "2.00 ms"],
        ["p99 W Lat", "8.00 ms", "8.00 ms"],
        ["Read bypasses", "1,234", "1,234"],
        ["Cache inserts", "0", "1 (20.0%)"],
        ["Stale reads", "0", "0"],
        ["Stale cached blocks", "0", "0"],
    ]
    assert fio_table(res) == format_table(["Metric", "Page lk", "Global lk"], body)
    # an unpatched column with no I/O at all: nothing to compare against
    zero = {"rows": [_nbd_row("none", 0, 0, 1.0, 0, 0), _nbd_row("page", 5, 5, 1.0, 0, 0)]}
    assert fio_table(zero).splitlines()[5].split() == ["vs", "unpatched", "-", "-"]


def test_fio_with_write_options_names_the_track_per_column_and_adds_the_writethrough_and_cost_rows(monkeypatch,
                                                                                                    capsys):
    def row(variant, track, k, vs):
        return dict(_fio_row(variant, k, 1.0), track=track, writethrough_writes=10 * k, writethrough_fallbacks=k,
                    tracker_starts=20 * k, ns_per_io_vs_track_bypass=vs,
                    ns_per_io_vs_track_bypass_range=None if vs is None else [vs - 0.1, vs + 0.2],
                    bypass_fraction_vs_track_bypass=None if vs is None else vs)
    res = _fio_result([row("none", "bypass", 1, None), row("page", "bypass", 1, 1.0), row("page", "all", 2, 1.25)])
    res["config"].update(write_kind="mixed", cache_alloc_fail=0.01, tracks=["bypass", "all"])
    calls = _fake_fio(monkeypatch, res)
    assert fio.run(_args("fio", "--writes", "mixed", "--cache-alloc-fail", "0.01", "--track", "bypass,all")) == 0
    assert calls[0]["track"] == ["bypass", "all"]
    lines = capsys.readouterr().out.splitlines()
    assert "70% 4 KiB reads / 128 KiB writes, " in lines[0]
    assert lines[1] == ("writes mixed, cache allocation failure chance 0.01, tracked writes: bypass, all "
                        "(\"none\" runs once: it has no tracker)")
    assert lines[2].split("  ")[0] == "Metric" and "Page lk (bypass)" in lines[2] and "Page lk (all)" in lines[2]
    table = {ln[:40].strip(): ln[40:].split("  ") for ln in lines[4:]}
    cells = {k: [c.strip() for c in v if c.strip()] for k, v in table.items()}
    assert cells["Tracker starts"] == ["20", "20", "40"]
    assert cells["fallbacks (invalidate)"] == ["1", "1", "2"]
    assert cells["CPU ns per I/O vs track bypass [rounds]"] == ["-", "1.000x [0.90-1.20]", "1.250x [1.15-1.45]"]
    assert cells["Read bypass share vs track bypass"] == ["-", "1.000x", "1.250x"]
