"""Shared fixtures. Tests import the installed or in-place-built package, never the sources alone."""
from __future__ import annotations

import itertools

import pytest

import pybcache

SYNCS = ("global", "page", "atomic")
BITS = (16, 32, 64)
MiB = pybcache.MiB
GiB = pybcache.GiB


@pytest.fixture(params=SYNCS)
def sync(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(params=list(itertools.product(SYNCS, BITS)), ids=lambda p: f"{p[0]}-u{p[1]}")
def variant(request: pytest.FixtureRequest) -> tuple[str, int]:
    return request.param
