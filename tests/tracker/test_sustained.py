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
