"""``pybcache/bcache/cachedev.py``'s small helpers (counts, labels, progress, the schedule bound, block and entry
names) and how a counterexample step is printed (``render_step``, docs/cachedev.md), on records chosen here."""
from __future__ import annotations

import math
import types

import pytest

from pybcache.bcache import cachedev
from pybcache.bcache.cachedev import render_step

from helpers.cachedev_stand_ins import _rec


approx = pytest.approx


def test_report_counts_sums_the_counts_of_each_kind():
    reports = [{"kind": "hung", "count": 2}, {"kind": "bug", "count": "3"}, {"kind": "hung", "count": 5}]
    assert cachedev.report_counts(reports) == {"hung": 7, "bug": 3}
    assert cachedev.report_counts([]) == {}


def test_patch_label_is_the_name_and_the_path_in_parentheses():
    assert cachedev.patch_label(types.SimpleNamespace(name="v2", path="/x/v2.c")) == "v2 (/x/v2.c)"


def test_progress_passes_the_items_through_or_wraps_them_with_the_total():
    assert list(cachedev._progress(None, iter([1, 2]), 9)) == [1, 2]
    seen = []

    def bar(items, total):
        seen.append(total)
        return [x * 10 for x in items]
    assert list(cachedev._progress(bar, iter([1, 2]), 9)) == [10, 20] and seen == [9]
    with pytest.raises(TypeError) as info:
        list(cachedev._progress(3, [1], 1))
    assert str(info.value) == "progress must be a callable (iterable, total) -> iterable or None, got int"


def test_schedule_bound_counts_the_interleavings_of_whole_operations():
    # multinomial: (4w + s r)! / (4!^w s!^r)
    assert cachedev._schedule_bound(1, 1, 5) == math.factorial(9) // (24 * 120) == 126
    assert cachedev._schedule_bound(2, 1, 5) == math.factorial(13) // (24 * 24 * 120) == 90090
    assert cachedev._schedule_bound(2, 2, 4) == math.factorial(16) // 24 ** 4 == 63063000
    assert cachedev._schedule_bound(0, 3, 4) == math.factorial(12) // 24 ** 3 == 34650
    assert cachedev._schedule_bound(1, 0, 5) == 1 and cachedev._schedule_bound(0, 0, 5) == 1
    # exact integers, however large (a float would round them): 8 writes = 32! / 4!^8
    assert type(cachedev._schedule_bound(2, 1, 5)) is int
    assert cachedev._schedule_bound(8, 0, 5) == math.factorial(32) // 24 ** 8 == 2390461829733887910000000


def test_blocks_and_chunks_name_one_or_a_half_open_range():
    assert cachedev._blocks(3, 4) == "block 3"
    assert cachedev._blocks(3, 5) == "blocks [3, 5)"
    assert cachedev._chunks(0, 4096, 4096) == "chunk 0"
    assert cachedev._chunks(4096, 8192, 4096) == "chunk 1"
    assert cachedev._chunks(4095, 4097, 4096) == "chunks [0, 2)"
    assert cachedev._chunks(8192, 3 * 8192 + 1, 8192) == "chunks [1, 4)"


def test_entry_names_an_empty_slot_a_check_key_and_a_valid_version():
    assert cachedev._entry(0) == "empty"
    assert cachedev._entry((7 << 2) | 1) == "check key #7"
    assert cachedev._entry((1 << 38) | (5 << 2) | 1) == "check key #5"   # only 36 bits of key
    assert cachedev._entry((0xFFFFFFFFF << 2) | 1) == "check key #68719476735"
    assert cachedev._entry(9 << 2) == "valid v9"
    assert cachedev._entry((9 << 2) | 2) == "valid v9"
    assert cachedev._entry((9 << 2) | 3) == "valid v9"


def test_write_tracker_text_states_each_outcome_of_a_start():
    t = cachedev._write_tracker_text
    assert t(_rec(flags=["blocked"], count=65535), 4096) == (
        "tracker start stops at a full counter (65535): WAITS for an end; chunk 0 counted so far")
    assert t(_rec(flags=["untracked"], hi=8192), 4096) == (
        "tracker start on chunks [0, 2): page allocation failed, write left UNTRACKED")
    assert t(_rec(flags=["wrapped"], count=0), 4096) == "tracker start on chunk 0: counter WRAPPED to 0 (overflow)"
    assert t(_rec(flags=["clamped"], count=2), 4096) == (
        "tracker start on chunk 0: counter CLAMPED at 2 (increment dropped)")
    assert t(_rec(count=3), 4096) == "tracker start on chunk 0: counter 3"


def _r(rec, check="after", granularity="chunk", chunk_size=4096, max_restarts=3, patch=False):
    return render_step(rec, check=check, granularity=granularity, chunk_size=chunk_size,
                       max_restarts=max_restarts, patch=patch)


def test_render_write_start_names_the_version_and_the_tracker_outcome():
    assert _r(_rec(version=2, count=1)) == "W1 start: version v2; tracker start on chunk 0: counter 1"
    assert _r(_rec(flags=["no_tracking"])) == "W1 start: version v1; no tracking (unpatched)"
    assert _r(_rec(flags=["more"], hi=8192, count=1)) == (
        "W1 start: version v1; tracker start on chunks [0, 2): counter 1; more tracker steps of this call follow")
    assert _r(_rec(flags=["untracked"])) == (
        "W1 start: version v1; tracker start on chunk 0: page allocation failed, write left UNTRACKED")


def test_render_invalidate_and_land_name_the_blocks():
    assert _r(_rec(step="invalidate", lo=0, hi=2)) == (
        "W1 invalidate: cache blocks [0, 2) emptied (check keys included); the node sequence moves")
    assert _r(_rec(step="land", version=3, lo=1, hi=2)) == "W1 land: v3 reaches the backing device (block 1)"


def test_render_write_end_states_the_counter_underflow_and_completion():
    assert _r(_rec(step="end", count=0)) == "W1 end: tracker end on chunk 0: counter 0; v1 completed"
    assert _r(_rec(step="end", flags=["underflow"])) == (
        "W1 end: tracker end on chunk 0: found a zero counter (UNDERFLOW refused); v1 completed")
    assert _r(_rec(step="end", flags=["more"], hi=8192, count=2)) == (
        "W1 end: tracker end on chunks [0, 2): counter 2; more tracker steps of this call follow")
    assert _r(_rec(step="end", flags=["no_tracking"], version=4)) == "W1 end: no tracking; v4 completed"


def test_render_check_states_the_placement_the_scope_and_the_verdict():
    rec = _rec(op="R1", step="check")
    assert _r(rec, check="entry") == "R1 tracker check at ENTRY (before the lookup): no active write"
    assert _r(rec, check="miss") == "R1 tracker check in the MISS path (before the check key): no active write"
    assert _r(_rec(op="R1", step="check", flags=["active"]), granularity="page") == (
        "R1 tracker check AFTER the check key (whole tracking page): "
        "an active write overlaps -> the read bypasses the cache")
    assert _r(_rec(op="R1", step="check", flags=["more"])) == (
        "R1 tracker check AFTER the check key: no active write; more tracker steps of this call follow")


def test_render_lookup_names_each_block_entry_and_the_outcome():
    assert _r(_rec(op="R1", step="lookup", lo=2, a=[0, 5 << 2], flags=["hit"])) == (
        "R1 lookup: block 2 empty, block 3 valid v5 -> hit")
    assert _r(_rec(op="R1", step="lookup", lo=0, a=[(4 << 2) | 1])) == "R1 lookup: block 0 check key #4 -> miss"
    assert _r(_rec(op="R1", step="lookup", lo=0, a=[0], flags=["active"])) == (
        "R1 lookup: block 0 empty -> already bypassing, no check key")


def test_render_check_key_states_the_sequence_and_the_restart():
    assert _r(_rec(op="R1", step="check_key", count=1)) == (
        "R1 check key: node sequence unchanged (1): check key placed on the missed blocks")
    assert _r(_rec(op="R1", step="check_key", flags=["restart"], count=1, seq_now=3, version=2)) == (
        "R1 check key: node sequence moved 1 -> 3 since the lookup: -EINTR, the lookup restarts (restart 2)")
    assert _r(_rec(op="R1", step="check_key", flags=["restart", "capped"], count=1, seq_now=3, version=4),
              max_restarts=4) == (
        "R1 check key: node sequence moved 1 -> 3 since the lookup: -EINTR, the lookup restarts (restart 4)"
        "; restart bound 4 reached, schedule cut")
    assert _r(_rec(op="R1", step="check_key", flags=["forced"], count=1, seq_now=2)) == (
        "R1 check key: node sequence moved 1 -> 2 since the lookup, but the restart is switched off: "
        "check key placed anyway")


def test_render_backing_read_lists_only_the_blocks_read():
    assert _r(_rec(op="R1", step="backing", lo=4, a=[1, 2, 3], b=[1, 0, 1])) == (
        "R1 backing read: block 4 = v1, block 6 = v3")


def test_render_insert_states_skipped_collision_or_cached():
    assert _r(_rec(op="R1", step="insert", flags=["active"])) == "R1 replace-insert skipped (bypass): nothing cached"
    assert _r(_rec(op="R1", step="insert", version=1, count=2)) == (
        "R1 replace-insert: check key gone on 1 block(s) -> miss collision; 2 block(s) cached")
    assert _r(_rec(op="R1", step="insert", version=0, count=3)) == (
        "R1 replace-insert: check key intact -> 3 block(s) cached")


def test_render_return_marks_each_version_older_than_its_floor_stale():
    assert _r(_rec(op="R1", step="return", a=[1, 2], b=[1, 2])) == "R1 returns v1, v2"
    assert _r(_rec(op="R1", step="return", a=[0, 2], b=[1, 2], flags=["stale"])) == (
        "R1 returns v0 (STALE), v2: STALE READ, a newer version had completed before R1 began")
    assert _r(_rec(op="R1", step="return", a=[2], b=[3])) == "R1 returns v2 (STALE)"


def test_render_reclaim_stale_block_and_stuck():
    assert _r(_rec(op="D1", step="reclaim", version=2)) == "D1 reclaim: 2 idle tracker page(s) freed"
    assert _r(_rec(op="", step="stale_block", lo=3, a=[0], b=[1])) == (
        "at quiescence: block 3 is cached as v0 but the backing device holds v1 "
        "(STALE CACHED BLOCK: later reads hit old data)")
    assert _r(_rec(op="", step="stuck")) == "every unfinished operation is blocked: the schedule is stuck"


def test_render_assumes_the_labs_tracker_unless_told_a_patch():
    assert render_step(_rec(count=2), check="after", granularity="chunk", chunk_size=4096, max_restarts=3) == (
        "W1 start: version v1; tracker start on chunk 0: counter 2")


def test_render_refuses_an_unknown_step_naming_it():
    with pytest.raises(ValueError) as info:
        _r(_rec(step="teleport"))
    assert str(info.value) == "unknown explorer step 'teleport'"


def test_render_a_patchs_steps_by_the_kernels_hooks_without_counters():
    assert _r(_rec(step="start", version=2, lo=0, hi=8192, count=9), patch=True) == (
        "W1 start: version v2; patch write_start on bytes [0, 8192): returned")
    assert _r(_rec(step="start", flags=["untracked"], lo=4096, hi=8192), patch=True) == (
        "W1 start: version v1; patch write_start on bytes [4096, 8192): an allocation failed during the call "
        "(the write may be UNTRACKED)")
    assert _r(_rec(step="end", version=3, lo=0, hi=4096), patch=True) == (
        "W1 end: patch write_end on bytes [0, 4096) (a completion); v3 completed")
    assert _r(_rec(op="R1", step="check"), check="entry", patch=True) == (
        "R1 patch read_bypass at ENTRY (before the lookup): no active write")
    assert _r(_rec(op="R1", step="check", flags=["active"]), patch=True) == (
        "R1 patch read_bypass AFTER the check key: an active write overlaps -> the read bypasses the cache")
    # the other steps are the model's own, printed as without a patch
    assert _r(_rec(step="land", version=3, lo=1, hi=2), patch=True) == (
        "W1 land: v3 reaches the backing device (block 1)")


def test_a_real_counterexample_is_rendered_step_by_step():
    out = cachedev.explore(writes=1, reads=1, check="entry", restart=False)
    assert out["counterexample"] == [_r(s, check="entry") for s in out["counterexample_steps"]]
    assert out["counterexample"][0] == "R1 tracker check at ENTRY (before the lookup): no active write"
    assert out["counterexample"][-1].startswith("at quiescence: block 0 is cached as v0")
