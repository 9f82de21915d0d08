"""The sustained-load experiment (``pybcache/bcache/experiments/sustained.py``): its rows and table on figures
chosen here, the tracker and its stress run stood in for. Nothing timed."""
from __future__ import annotations

import json
import logging

import pytest

from pybcache.bcache.experiments import sustained
from pybcache.units import GiB, KiB


approx = pytest.approx


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
                                                        "pool_refills", "mempool_rounds", "mempool_wakeups",
                                                        "mempool_nulls", "not_reported"))}

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
    # the stall is the faulted run's whole rounds in modelled time: 7 rounds x the kernel's 5 s
    assert row == {"policy": "mempool", "pool_pages": 2, "gfp": "noio", "failures": 3, "checks": 1001,
                   "bypasses_without_fault": 40, "bypasses_with_fault": 100, "ratio": 2.5, "ratio_not_measured": None,
                   "extra_bypasses": 60,
                   "writes_lost": 3, "stall_rounds": 7, "stall_s": 35.0,
                   "alloc_failures": 0, "pages_allocated": 1, "hijack_events": 2, "untracked_writes": 3,
                   "underflows": 4, "mempool_waits": 5, "pool_refills": 6, "mempool_rounds": 7,
                   "mempool_wakeups": 8, "mempool_nulls": 9}


def test_a_run_without_the_fault_that_bypassed_nothing_gives_no_ratio_instead_of_a_division_by_zero():
    # one write, one check: the clean run's check misses the write's chunk; hijacked, the faulted run's check
    # lands in the write's 32 GiB half and bypasses (the real tracker, one thread, inline completions: seeded)
    row = sustained.sustained_load("hijack", ops=1)
    assert (row["bypasses_without_fault"], row["bypasses_with_fault"], row["extra_bypasses"]) == (0, 1, 1)
    assert row["ratio"] is None
    assert row["ratio_not_measured"] == sustained.NO_CLEAN_BYPASS == "not measured: 0 bypasses in the run without " \
                                                                      "the fault"


def test_the_sustained_table_prints_why_a_ratio_was_not_measured(monkeypatch, capsys):
    _stand_in_rows(monkeypatch)
    real = sustained.sustained_load

    def one_unmeasured(policy, **kw):
        row = real(policy, **kw)
        return dict(row, ratio=None, ratio_not_measured=sustained.NO_CLEAN_BYPASS) if policy == "pool" else row
    monkeypatch.setattr(sustained, "sustained_load", one_unmeasured)
    assert sustained.main(["--failures", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == "| untracked | 0 | noio | 1 | 8 | 10 | 2.250 | 3 | 1 | 5 | 1 | 1 | 2 | 4 | 5 | 6 | 7 |"
    assert lines[4] == ("| pool | 1 | noio | 1 | 8 | 10 | not measured: 0 bypasses in the run without the fault | 3 | "
                        "1 | 5 | 1 | 1 | 2 | 4 | 5 | 6 | 7 |")


def test_sustained_load_passes_a_nowait_mask_and_scales_the_stall_by_the_round_given(monkeypatch):
    made, _ = _stand_in_tracker(monkeypatch)
    row = sustained.sustained_load("mempool", pool_pages=1, gfp="nowait", round_s=0.5)
    assert [t.kw["gfp"] for t in made] == ["nowait", "nowait"]
    assert (row["gfp"], row["stall_rounds"], row["stall_s"]) == ("nowait", 7, 3.5)
    with pytest.raises(ValueError, match=r"^round_s must be > 0 seconds, got 0$"):
        sustained.sustained_load("mempool", round_s=0)


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

    def sustained_load(policy, *, pool_pages, gfp, failures, ops, seed, round_s):
        calls.append((policy, pool_pages, gfp, failures, ops, seed, round_s))
        return {"policy": policy, "pool_pages": pool_pages, "gfp": gfp, "failures": failures,
                "bypasses_without_fault": 8, "bypasses_with_fault": 10, "ratio": 10 / 8 + failures,
                "ratio_not_measured": None,
                "extra_bypasses": 2, "writes_lost": 3, "stall_rounds": failures, "stall_s": failures * round_s,
                "alloc_failures": failures, "pages_allocated": 1, "hijack_events": 2, "untracked_writes": 3,
                "underflows": 4, "mempool_waits": 5, "pool_refills": 6, "mempool_rounds": failures,
                "mempool_wakeups": 0, "mempool_nulls": 7, "checks": 99}

    monkeypatch.setattr(sustained, "sustained_load", sustained_load)
    return calls


def test_the_sustained_table_has_a_row_per_failure_count_and_policy_with_the_ratio_to_3_places(monkeypatch, capsys):
    calls = _stand_in_rows(monkeypatch)
    assert sustained.main([]) == 0
    assert calls == [(p, n, g, f, 200_000, 3, 5.0) for f in (1, 2, 3) for p, n, g in sustained.GFP_POLICIES]
    # every policy of the brief: untracked, hijack, pool, mempool with min_nr 0, 1 and 8 (a sleeping
    # mask), and mempool under GFP_NOWAIT with min_nr 0 and 1
    assert sustained.GFP_POLICIES == (("untracked", 0, "noio"), ("hijack", 0, "noio"), ("pool", 1, "noio"),
                                      ("mempool", 0, "noio"), ("mempool", 1, "noio"), ("mempool", 8, "noio"),
                                      ("mempool", 0, "nowait"), ("mempool", 1, "nowait"))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("| policy | pool_pages | gfp | failures | bypasses_without_fault | bypasses_with_fault | "
                        "ratio | writes_lost | stall_rounds | stall_s | alloc_failures | pages_allocated | "
                        "hijack_events | underflows | mempool_waits | pool_refills | mempool_nulls |")
    assert lines[1] == "|" + "---|" * 17
    assert lines[2] == "| untracked | 0 | noio | 1 | 8 | 10 | 2.250 | 3 | 1 | 5 | 1 | 1 | 2 | 4 | 5 | 6 | 7 |"
    assert lines[9] == "| mempool | 1 | nowait | 1 | 8 | 10 | 2.250 | 3 | 1 | 5 | 1 | 1 | 2 | 4 | 5 | 6 | 7 |"
    assert lines[10] == "| untracked | 0 | noio | 2 | 8 | 10 | 3.250 | 3 | 2 | 10 | 2 | 1 | 2 | 4 | 5 | 6 | 7 |"
    assert len(lines) == 2 + 3 * 8


def test_the_sustained_json_holds_the_rows_of_the_failures_ops_and_seed_given(monkeypatch, capsys):
    calls = _stand_in_rows(monkeypatch)
    assert sustained.main(["--failures", "3", "4", "--ops", "10", "--seed", "7", "--round", "2", "--json"]) == 0
    assert calls == [(p, n, g, f, 10, 7, 2.0) for f in (3, 4) for p, n, g in sustained.GFP_POLICIES]
    out = capsys.readouterr().out
    rows = [sustained.sustained_load(p, pool_pages=n, gfp=g, failures=f, ops=10, seed=7, round_s=2.0)
            for f in (3, 4) for p, n, g in sustained.GFP_POLICIES]
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
