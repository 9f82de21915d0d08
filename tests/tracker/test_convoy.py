"""The writeback_lock convoy model (``pybcache/bcache/experiments/convoy.py``): a deterministic event simulation,
checked against a schedule worked out by hand and against its own invariants. Nothing timed."""
from __future__ import annotations

import pytest

from pybcache.bcache.experiments.convoy import convoy, simulate


def test_a_hand_worked_schedule():
    """Writes every 100 µs taking 50 µs; the writeback thread asks for the write side at 1,000 µs and holds it
    100 µs. Baseline: it waits for write 10 (50 µs) and write 11 waits for its hold (50 µs). With writes 9 and
    19 sleeping 300 µs in their start: it waits for write 9 until 1,250 (250 µs) and writes 11, 12, 13 queue
    behind it until 1,350 (250 + 150 + 50 µs); write 19's sleep meets no writer."""
    kw = dict(gap_us=100, io_us=50, sleep_every=10, hold_us=100, period_us=1000, horizon_us=2000)
    base = simulate(**kw, sleep_us=0)
    assert base == {"writes": 20, "writeback_passes": 1, "writeback_wait_us": 50, "writeback_wait_max_us": 50,
                    "writes_delayed": 1, "write_delay_us": 50, "write_delay_max_us": 50}
    slow = simulate(**kw, sleep_us=300)
    assert slow == {"writes": 20, "writeback_passes": 1, "writeback_wait_us": 250, "writeback_wait_max_us": 250,
                    "writes_delayed": 3, "write_delay_us": 450, "write_delay_max_us": 250}
    out = convoy(**kw, sleep_us=300)
    assert (out["writeback_wait_ratio"], out["writes_delayed_ratio"], out["write_delay_ratio"]) == (5.0, 3.0, 9.0)


def test_without_the_writeback_thread_nothing_waits():
    out = convoy(sleep_us=5000, sleep_every=7, period_us=10 ** 8, horizon_us=100_000)
    assert out["sleeping"]["writeback_passes"] == 0 and out["sleeping"]["writes_delayed"] == 0
    assert out["writes_delayed_ratio"] is None          # the baseline's figure is 0: no ratio


def test_a_mempool_round_convoys_the_writeback_thread_and_the_writes_behind_it():
    """One start sleeping a whole 5 s mempool round stalls the writeback thread for about that long and queues
    every write that arrives meanwhile; a 1 ms sleep (an overflow wait) costs little."""
    long = convoy(sleep_us=5_000_000, sleep_every=50_000, horizon_us=10_000_000)
    assert long["sleeping"]["writeback_wait_max_us"] >= 4_900_000 > long["baseline"]["writeback_wait_max_us"]
    assert long["writeback_wait_ratio"] > 5 and long["writes_delayed_ratio"] > 2
    short = convoy(sleep_us=1000, sleep_every=1000, horizon_us=1_000_000)
    assert short["writeback_wait_ratio"] < 1.5


def test_bad_input():
    with pytest.raises(ValueError, match="sleep_us must be"):
        convoy(sleep_us=0)
    with pytest.raises(ValueError, match="horizon_us / gap_us must be at most"):
        convoy(gap_us=1, horizon_us=10 ** 9)
