"""Fixtures of the cached-device tests."""
from __future__ import annotations

import pytest

from pybcache.bcache import cachedev

from helpers.cachedev_stand_ins import _SLICE_KEYS, FakeDevice


@pytest.fixture
def race_model(monkeypatch):
    calls = []

    def fake_slice(dev, **kw):
        calls.append((dev, kw))
        k = len(calls)
        part = {key: k * (i + 1) for i, key in enumerate(_SLICE_KEYS)}
        part["elapsed_ns"] = 250_000_000
        return part
    FakeDevice.made = []
    monkeypatch.setattr(cachedev, "CachedDevice", FakeDevice)
    monkeypatch.setattr(cachedev, "_race_slice", fake_slice)
    return calls
