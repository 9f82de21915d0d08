"""``pybcache/_log.py``: the rate-limited untracked-write warning, on a fake clock."""
from __future__ import annotations

import logging

import pytest

from pybcache import _log


@pytest.fixture
def window(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(_log, "_clock", lambda: now[0])
    _log.reset()
    yield now
    _log.reset()


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "pybcache" and r.levelno == logging.WARNING]


def test_untracked_writes_warn_once_per_five_seconds_carrying_the_suppressed_count(window, caplog):
    caplog.set_level(logging.WARNING, logger="pybcache")
    assert _log.INTERVAL_S == 5.0 and _log.logger.name == "pybcache"
    _log.log_untracked(2)               # at 100 s
    window[0] += 4.5
    _log.log_untracked(3)
    _log.log_untracked(4)
    window[0] += 0.5                    # exactly five seconds after the first warning: a new one
    _log.log_untracked(1)
    window[0] += 1.0
    _log.log_untracked(5)
    window[0] += 4.0                    # five seconds after the second
    _log.log_untracked(1)
    assert _warnings(caplog) == [
        f"bypass write tracking: page allocation failed, {n} write(s) left untracked "
        "(reads overlapping them may cache stale data)" for n in (2, 8, 6)
    ]


def test_reset_opens_the_window_and_forgets_the_suppressed_count(window, caplog):
    caplog.set_level(logging.WARNING, logger="pybcache")
    _log.log_untracked(1)
    _log.log_untracked(6)
    _log.reset()
    _log.log_untracked(1)
    assert [m.split(", ")[1] for m in _warnings(caplog)] == ["1 write(s) left untracked (reads overlapping them "
                                                            "may cache stale data)"] * 2


def test_the_first_untracked_write_warns_at_any_clock_value(window, caplog):
    caplog.set_level(logging.WARNING, logger="pybcache")
    window[0] = -1e12
    _log.log_untracked(1)
    assert len(_warnings(caplog)) == 1
