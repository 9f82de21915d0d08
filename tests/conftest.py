"""Shared fixtures. Tests import the installed or in-place-built package, never the sources alone."""
from __future__ import annotations

import itertools
import os

import pytest
from hypothesis import HealthCheck, settings

import pybcache

# Hypothesis profiles. CI (CI=true) is derandomised: the same examples on every run, so a red CI means a
# real change, and it stays a complete check because every fuzz test must also pass under any seed. Local
# runs draw fresh examples each time ("dev"); pick one with HYPOTHESIS_PROFILE=ci|dev.
# Neither profile times anything: Hypothesis's default 200 ms deadline per example (and its too_slow health
# check) fails a test whose thread was descheduled for a moment (a 300 ms stall in one example of
# test_units.py's parse_size test gave FlakyFailure). Under CI=true Hypothesis's own CI profile, loaded at its
# import, happened to lend "ci" these two settings; HYPOTHESIS_PROFILE=ci without CI set, "dev", and a
# Hypothesis without that profile (6.80 is allowed) did not have them.
UNTIMED = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", derandomize=True, print_blob=True, **UNTIMED)
settings.register_profile("dev", print_blob=True, **UNTIMED)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))

SYNCS = ("global", "page", "atomic")
BITS = (16, 32, 64)
MiB = pybcache.MiB
GiB = pybcache.GiB


@pytest.fixture
def plain_help(monkeypatch: pytest.MonkeyPatch) -> None:
    """argparse lays its help out for the terminal (COLUMNS) and, from Python 3.14, may colour it: a test that
    reads a --help text gets one wide, plain layout whatever terminal runs it."""
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("FORCE_COLOR", raising=False)


@pytest.fixture(params=SYNCS)
def sync(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(params=list(itertools.product(SYNCS, BITS)), ids=lambda p: f"{p[0]}-u{p[1]}")
def variant(request: pytest.FixtureRequest) -> tuple[str, int]:
    return request.param
