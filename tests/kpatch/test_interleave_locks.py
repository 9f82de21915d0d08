"""The patch-level explorer's scheduling points in the shim's second API group (issue 26): rwlocks, sequence
counts and mutexes. Before, a thread that spun on an rwlock or an odd count held by a descheduled thread
never yielded to the explorer (the shim's hung bound ended it as a lockup), and no interleaving around
those calls was explored. Each test patch (tests/data) passes every scenario completely; a one-point
mutant of each fails deterministically with a counterexample at the patch's own steps."""
from __future__ import annotations

from pathlib import Path

import pytest

from pybcache.bcache.kpatch.interleave import SCENARIOS, explore_patch

pytestmark = [pytest.mark.native, pytest.mark.xdist_group("native-threads")]

DATA = Path(__file__).resolve().parents[1] / "data"
RW = DATA / "rw_counter.c"
SEQ = DATA / "seq_slots.c"
MUTEX = DATA / "mutex_counter.c"


def _mutant(tmp_path: Path, src: Path, name: str, edits: list[tuple[str, str]]) -> Path:
    text = src.read_text()
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    out = tmp_path / f"{name}.c"
    out.write_text(text)
    return out


def _steps_text(f: dict) -> str:
    return "\n".join(f["steps"])


@pytest.mark.parametrize("patch", [RW, SEQ, MUTEX], ids=lambda p: p.name)
@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s != "2w"])
def test_each_lock_patch_is_explored_completely_and_passes(patch, scenario):
    k = 0
    while True:
        r = explore_patch(patch, scenario, fault_at=k, stop_on_failure=False)
        assert r["complete"] and r["error"] is None and not r["failures"], (k, r["failures"])
        assert r["executions"] > 1
        if k and not r["faults_injected"]:
            break
        k += 1
        assert k < 4


# (the brute-force class counts of rw_counter.c and mutex_counter.c are in test_interleave.py, beside
# tiny_counter.c's)


@pytest.mark.parametrize("patch, scenario", [(RW, "1w2r"), (MUTEX, "1w2r"), (SEQ, "1w1r"), (SEQ, "2w")])
def test_dpor_executions_equal_the_sleep_set_class_count(patch, scenario):
    sleep = explore_patch(patch, scenario, mode="sleep", count_classes=True)
    dpor = explore_patch(patch, scenario, count_classes=True)
    assert sleep["complete"] and dpor["complete"] and not sleep["failures"] and not dpor["failures"]
    assert dpor["executions"] == dpor["classes"] == sleep["classes"]
    assert dpor["executions"] + dpor["blocked"] < sleep["executions"] + sleep["blocked"]
    optimal = explore_patch(patch, scenario, mode="optimal", count_classes=True)
    assert optimal["complete"] and optimal["diverged"] == 0
    assert (optimal["executions"], optimal["classes"], optimal["blocked"]) == (dpor["classes"], dpor["classes"], 0)


def test_readers_share_an_rwlock_and_are_not_reordered_among_themselves():
    # 1w2r: the two readers' read_lock/read_unlock commute, so the classes are those of 1w1r's steps
    # interleaved with a second reader whose lock steps race only with the writer's
    r = explore_patch(RW, "1w2r", count_classes=True)
    assert r["complete"] and r["executions"] == r["classes"]
    spin = explore_patch(DATA / "tiny_counter.c", "1w2r", count_classes=True)
    assert spin["complete"] and r["executions"] < spin["executions"]   # a spinlock orders its readers


def test_counting_under_the_read_side_of_the_rwlock_is_a_data_race(tmp_path):
    path = _mutant(tmp_path, RW, "rw_inc_under_read", [
        ("        write_lock_irq(&t->lock);\n        t->writes++;\n        write_unlock_irq(&t->lock);",
         "        read_lock_irq(&t->lock);\n        t->writes++;\n        read_unlock_irq(&t->lock);")])
    src = path.read_text().splitlines()
    r = explore_patch(path, "1w1r")
    [race] = r["failures"]
    assert race["kind"] == "data race"
    assert race["message"].startswith("BUG: KCSAN: data-race in rwc_write_start / rwc_read_bypass")
    (fa, la), (fb, lb) = [s.split(":") for s in race["sites"]]
    assert fa == fb == path.name
    assert "t->writes++" in src[int(la) - 1] and "t->writes > 0" in src[int(lb) - 1]
    text = _steps_text(race)
    assert "W1: read" in text and f"read_lock {path.name}:" in text and f"write_lock {path.name}:" in text
    again = explore_patch(path, "1w1r")
    assert (again["executions"], again["failures"][0]["message"]) == (r["executions"], race["message"])
    two = explore_patch(path, "2w1r", stop_on_failure=False)
    assert two["complete"] and any(f["kind"] == "count leaked" for f in two["failures"])   # a lost increment


def test_an_rwlock_upgrade_is_a_deadlock_not_a_hang(tmp_path):
    path = _mutant(tmp_path, RW, "rw_upgrade", [
        ("        write_lock_irq(&t->lock);\n        t->writes++;",
         "        read_lock_irq(&t->lock);\n        write_lock(&t->lock);\n        t->writes++;\n"
         "        write_unlock(&t->lock);\n        read_unlock(&t->lock);\n        write_lock_irq(&t->lock);")])
    r = explore_patch(path, "1w1r")
    assert r["error"] is None                     # not "an execution did not end within 60 s"
    [f] = r["failures"]
    # the explorer sees no thread able to run; released, the writer spins until the shim's hung bound
    assert "deadlock" in f["kinds"] and f["message"].startswith(f"lockup at {path.name}:")
    assert f["steps"][0].startswith("W1: ") and f["steps"][0].endswith(f"read_lock {path.name}:40")


def test_a_seqcount_reader_that_does_not_retry_misses_a_write_in_flight(tmp_path):
    path = _mutant(tmp_path, SEQ, "seq_no_retry", [("} while (read_seqretry(&t->lock, seq));",
                                                   "} while (0 && read_seqretry(&t->lock, seq));")])
    one = explore_patch(path, "1w1r", stop_on_failure=False)
    assert one["complete"] and not one["failures"]      # one writer: nothing moves while the reader scans
    r = explore_patch(path, "2w1r")
    [f] = r["failures"]
    assert f["kind"] == "missed bypass" and "W2's write was in flight" in f["message"]
    text = _steps_text(f)
    # the reader scans while W1's end moves the table: W1's write section sits between two of its reads
    assert "R1: read begins" in text and f"read_seqcount_begin {path.name}:" in text
    i_begin = text.index("R1: read begins")
    i_w1 = text.index(f"write_seqcount_begin {path.name}:", text.index("W1: spin_lock", i_begin))
    i_ret = text.index("read returned (not active)")
    assert i_begin < i_w1 < i_ret
    again = explore_patch(path, "2w1r")
    assert (again["executions"], again["failures"][0]["steps"]) == (r["executions"], f["steps"])


def test_a_seqlock_writer_without_the_count_is_a_data_race_with_the_reader(tmp_path):
    path = _mutant(tmp_path, SEQ, "seq_end_no_count", [
        ("write_seqlock_irqsave(&t->lock, flags);", "spin_lock_irqsave(&t->lock.lock, flags);"),
        ("write_sequnlock_irqrestore(&t->lock, flags);", "spin_unlock_irqrestore(&t->lock.lock, flags);")])
    r = explore_patch(path, "1w1r")
    [race] = r["failures"]
    assert race["message"].startswith("BUG: KCSAN: data-race in seqs_write_end / seqs_read_bypass")
    assert "marked read" in race["message"]      # the reader's region is marked (KCSAN), the writer's is not
    assert f"read_seqcount_begin {path.name}:" in _steps_text(race)


def test_counting_after_the_mutex_unlock_is_a_data_race(tmp_path):
    path = _mutant(tmp_path, MUTEX, "mutex_inc_after_unlock", [
        ("        t->starts++;\n        mutex_unlock(&t->lock);",
         "        mutex_unlock(&t->lock);\n        t->starts++;")])
    r = explore_patch(path, "1w1r")
    [race] = r["failures"]
    assert race["message"].startswith("BUG: KCSAN: data-race in mxc_write_start / mxc_read_bypass")
    text = _steps_text(race)
    assert f"mutex_lock {path.name}:" in text and f"mutex_unlock {path.name}:" in text
    assert "wake_up" not in text                  # an unlock under the explorer wakes no one
    r2 = explore_patch(path, "2w1r", stop_on_failure=False)
    assert r2["complete"] and {"data race", "missed bypass"} <= {f["kind"] for f in r2["failures"]}
    assert explore_patch(path, "2w1r", stop_on_failure=False)["executions"] == r2["executions"]
