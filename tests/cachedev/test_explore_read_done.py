"""The read-done placement (a check after the backing read, before the insert): the explorer must find
its window, where the after placement (between the check key and the backing read) has none."""
from __future__ import annotations

import pytest

import pybcache

pytestmark = [pytest.mark.native]


def test_a_check_after_the_backing_read_lets_a_whole_write_pass_between_key_and_check():
    r = pybcache.explore(sync="page", check="read-done", writes=1, reads=1)
    assert r["violations"] > 0
    steps = r["counterexample"]
    text = "\n".join(steps)
    # the write ends before the read's check, which then sees nothing and caches the old data
    assert text.index("R1 backing read") < text.index("W1 end") < text.index("R1 tracker check at READ-DONE")
    assert "no active write" in text and "STALE CACHED BLOCK" in steps[-1]


def test_the_same_scenarios_with_the_check_before_the_backing_read_have_no_violation():
    for writes, reads in ((1, 1), (2, 1), (1, 2)):
        assert pybcache.explore(sync="page", check="after", writes=writes, reads=reads)["violations"] == 0
        assert pybcache.explore(sync="page", check="read-done", writes=writes, reads=reads)["violations"] > 0


def test_read_done_is_a_choice_of_race_and_the_command_line():
    from pybcache.bcache.cachedev import CHECKS
    assert "read-done" in CHECKS
    r = pybcache.race(sync="page", check="read-done", threads=2, seconds=0.2, seed=1)
    assert r["config"]["check"] == "read-done" and r["reads"] > 0
