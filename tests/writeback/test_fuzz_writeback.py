"""Fuzzing the memcg writeback model's public API with hostile values (issue 7).

A random sequence of calls on a small model (two memcgs, a file, a block device, a second model whose
entities are passed in as foreign objects) where every argument is either a real entity of the model or a
hostile value: arbitrary ints, floats, strings, None, numpy scalars and arrays, entities of the other
model. Each call succeeds or raises ``ValueError``/``TypeError``; a failed call changes nothing (the
model's full state is compared before and after); no call on one model changes the other; and after every
successful call the dirty-page accounting adds up (model total = sum over inodes = sum over memcgs).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from pybcache.writeback import (MECHANISMS, Scenario, WritebackModel, WritebackTunables, mkdev, run_experiment,
                                time_after_eq)
from helpers.hostile import hostile, is_int

MiB = 1 << 20
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def state(m: WritebackModel) -> Any:
    """Everything a call could change, as plain values."""
    memcgs = [(c.css_id, c.name, c.nr_dirty, c.online, c.freed, c._refs, [x.css_id for x in c.children],
               [(s.bdi_id, s.memcg_id, s.at, s.done.idle) for s in c.foreign_wb.slots],
               None if c.foreign_bdev is None else
               [(s.dev_t, s.at, s.in_flight, s.generation, s.device is not None) for s in c.foreign_bdev.slots])
              for c in m.memcgs.values()]
    inodes = [(i.ino, i.name, i.dirty, i.written, i.discarded, dict(i.written_by_reason), i.dirtied_when,
               [(r[0].css_id, r[1]) for r in i._runs], None if i.wb is None else (i.wb.memcg.css_id, i.wb.disk.bdi_id))
              for i in m.inodes]
    wbs = [(k, len(w.works), w.active is not None and w.active.reason, w.awake, w.next_wakeup, w.pages_written,
            w.background_kicked, [i.ino for i in w.inodes]) for k, w in m.wbs.items()]
    devices = [(d.dev_t, d.generation, d.openers, d.removed, d.refs) for d in m.all_devices]
    return (m.stats.as_dict(), m.nr_dirty, sorted(m.disks), memcgs, inodes, wbs, devices,
            sorted(m.devices._by_dev_t), m.mechanism, m.clock.now())


def check_accounting(m: WritebackModel) -> None:
    assert m.nr_dirty == sum(i.dirty for i in m.inodes) == sum(c.nr_dirty for c in m.memcgs.values())
    for i in m.inodes:
        assert i.dirty >= 0 and sum(r[1] for r in i._runs) == i.dirty
    # the simulation's per-tick flusher scan may leave out only wbs whose flusher has nothing to do now
    scanned = set(m._flushers_to_scan())
    for wb in m.wbs.values():
        due = wb.next_wakeup is not None and time_after_eq(m.clock.now(), wb.next_wakeup)
        busy = wb.active is not None or wb.awake or wb.works or wb.background_kicked or due
        assert wb in scanned or not busy, f"{wb} has flusher work but the scan leaves it out"


class World:
    def __init__(self, mechanism: str) -> None:
        self.m = WritebackModel(mechanism=mechanism)
        self.disk = self.m.add_disk("sda", 200 * MiB)
        self.a = self.m.create_memcg("a", memory_max=64 * MiB)
        self.b = self.m.create_memcg("b", parent=self.a)
        self.file = self.m.create_inode(self.disk, "file", size=4 * MiB)
        self.dev = self.m.add_block_device(mkdev(8, 0), self.disk)
        self.m.open_device(self.dev)
        self.m.dirty_pages(self.file, 10, self.a)
        self.m.dirty_pages(self.dev.mapping, 5, self.m.root)
        self.m.dirty_pages(self.dev.mapping, 3, self.b)          # foreign: recorded in b
        self.wb = self.m.wb_of(self.a, self.disk)
        # another model, whose entities are hostile arguments here (its inode has a wb of its own)
        self.o = WritebackModel(mechanism=mechanism)
        odisk = self.o.add_disk("sdb", 100 * MiB)
        self.ofile = self.o.create_inode(odisk, "ofile")
        self.odev = self.o.add_block_device(mkdev(8, 16), odisk)
        self.o.dirty_pages(self.ofile, 4, self.o.root)
        self.entities = [self.disk, self.a, self.b, self.m.root, self.file, self.dev, self.dev.mapping, self.wb,
                         self.ofile, self.odev, self.o.root, odisk, self.o.wb_of(self.o.root, odisk)]


def arg(kind: str) -> st.SearchStrategy[Any]:
    """A value for an argument: a plausible one of its kind, an entity of either model, or anything."""
    plausible = {
        "int": st.integers(-2, 40), "dev_t": st.sampled_from([mkdev(8, 0), mkdev(8, 16), mkdev(9, 1), 0, 2**32]),
        "num": st.floats(-1, 1e9), "str": st.text(max_size=4), "bool": st.booleans(),
    }[kind]
    return st.one_of(plausible, st.integers(0, 12).map(lambda i: ("entity", i)), hostile())


OPS: dict[str, tuple[str, ...]] = {
    "add_disk": ("str", "num"),
    "create_memcg": ("str", "kw:parent:entity", "kw:memory_max:int"),
    "destroy_memcg": ("entity",),
    "create_inode": ("entity", "str", "kw:size:int", "kw:label:str"),
    "add_block_device": ("dev_t", "entity"),
    "remove_block_device": ("dev_t",),
    "open_device": ("entity",),
    "close_device": ("entity",),
    "wb_of": ("entity", "entity", "kw:create:bool"),
    "dirty_pages": ("entity", "int", "entity"),
    "write_pages": ("entity", "int", "kw:reason:str"),
    "discard_pages": ("entity",),
    "hierarchical_dirty": ("entity",),
    "memcg_domain": ("entity",),
    "over_background_thresh": ("entity",),
    "balance_dirty_pages": ("entity", "int"),
    "flush_foreign": ("entity",),
    "cgroup_writeback_by_id": ("int", "int", "kw:done:entity", "kw:issuer:str"),
    "flusher_next_work": ("entity",),
    "writeback_demand": ("entity",),
    "writeback_run": ("entity", "int"),
    "run_writeback_now": ("entity", "kw:max_works:int"),
    "sync_all": (),
    "shutdown": ("kw:drain:bool",),
}


def _resolve(world: World, v: Any) -> Any:
    if isinstance(v, tuple) and len(v) == 2 and v[0] == "entity":
        return world.entities[v[1] % len(world.entities)]
    return v


def _draw_call(data: st.DataObject, world: World) -> tuple[str, list, dict]:
    name = data.draw(st.sampled_from(sorted(OPS)), label="op")
    args, kwargs = [], {}
    for spec in OPS[name]:
        if spec.startswith("kw:"):
            _, key, kind = spec.split(":")
            if data.draw(st.booleans(), label=f"give {key}"):
                kwargs[key] = _resolve(world, data.draw(arg("int" if kind == "entity" else kind), label=key))
                if kind == "entity" and data.draw(st.booleans(), label=f"{key} entity"):
                    kwargs[key] = _resolve(world, ("entity", data.draw(st.integers(0, 12))))
        elif spec == "entity":
            v = data.draw(st.integers(0, 12).map(lambda i: ("entity", i)) | hostile(), label="entity")
            args.append(_resolve(world, v))
        else:
            args.append(_resolve(world, data.draw(arg(spec), label=spec)))
    return name, args, kwargs


@FUZZ
@given(data=st.data(), mechanism=st.sampled_from(MECHANISMS), steps=st.integers(1, 12))
def test_hostile_call_sequences_fail_cleanly_and_keep_the_accounting(data, mechanism, steps):
    world = World(mechanism)
    m, o = world.m, world.o
    for _ in range(steps):
        name, args, kwargs = _draw_call(data, world)
        before, other_before = state(m), state(o)
        try:
            getattr(m, name)(*args, **kwargs)
        except (ValueError, TypeError) as exc:
            assert state(m) == before, f"{name}{tuple(args)}{kwargs} failed ({exc}) but changed the model"
            assert state(o) == other_before, f"{name} failed ({exc}) but changed the other model"
            continue
        assert state(o) == other_before, f"{name}{tuple(args)}{kwargs} on one model changed another"
        check_accounting(m)
    m.shutdown(drain=False)
    o.shutdown(drain=False)


CTOR = {"mechanism": "str", "dirtyable_memory": "int", "foreign_slots": "int", "bdev_slots": "int",
        "dirty_ratelimit": "num", "tunables": "x", "clock": "x", "workqueue_factory": "x"}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(CTOR)), bad=hostile())
def test_constructor_rejects_hostile_arguments_by_name(name, bad):
    try:
        m = WritebackModel(**{name: bad})
    except (ValueError, TypeError) as exc:
        assert name in str(exc) or (name == "clock" and "hz" in str(exc)), str(exc)
        return
    m.shutdown(drain=False)


# Whole floats are not ints: always tried, whatever Hypothesis draws.
@settings(max_examples=200, deadline=None)
@example(major=8.0, minor=1.0)
@example(major=8, minor=1.0)
@example(major=np.float64(8), minor=1)
@given(major=hostile() | st.integers(-1, 5000), minor=hostile() | st.integers(-1, 2**21))
def test_mkdev_rejects_hostile_numbers(major, minor):
    valid = (is_int(major) and is_int(minor) and 0 <= int(major) < 4096 and 0 <= int(minor) < 2**20
             and (int(major), int(minor)) != (0, 0))
    try:
        dev = mkdev(major, minor)
    except (ValueError, TypeError) as exc:
        assert not valid, f"valid mkdev({major!r}, {minor!r}) refused: {exc}"
        assert "major" in str(exc) or "minor" in str(exc), str(exc)
        return
    assert valid, f"invalid mkdev({major!r}, {minor!r}) accepted"
    assert dev == (int(major) << 20) | int(minor)


SCENARIO_FIELDS = [f.name for f in dataclasses.fields(Scenario)]
TUNABLE_FIELDS = [f.name for f in dataclasses.fields(WritebackTunables)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), kind=st.sampled_from(["Scenario", "WritebackTunables"]))
def test_scenario_and_tunables_reject_each_hostile_field_by_name(data, kind):
    cls, fields = (Scenario, SCENARIO_FIELDS) if kind == "Scenario" else (WritebackTunables, TUNABLE_FIELDS)
    name = data.draw(st.sampled_from(fields), label="field")
    bad = data.draw(hostile(), label="bad")
    try:
        obj = cls(**{name: bad})
    except (ValueError, TypeError) as exc:
        assert name in str(exc) or (name == "memory" and "dirtyable_memory" in str(exc)), str(exc)
        return
    assert getattr(obj, name) == bad


def test_a_numpy_timedelta_is_not_a_number_either():
    # regression: check_number let np.timedelta64 through to float(), whose NaT error named no field
    for bad in (np.timedelta64("NaT", "Y"), np.timedelta64(5, "s")):
        with pytest.raises(TypeError, match="cgroup_ops_rate"):
            Scenario(cgroup_ops_rate=bad)


def test_run_experiment_names_a_wrap_that_is_not_callable():
    # regression: a non-callable wrap failed inside the run loop with "'int' object is not callable"
    with pytest.raises(TypeError, match="wrap"):
        run_experiment(1, 0, wrap=3)


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(["runs", "seed", "scenario", "baseline", "patched", "wrap", "observer"]), bad=hostile())
def test_run_experiment_rejects_hostile_arguments_before_simulating(name, bad):
    # only values outside the documented domain: a valid one would run the (seconds-long) experiment
    valid = {"runs": lambda v: is_int(v) and 1 <= int(v) <= 1000,
             "seed": lambda v: is_int(v) and 0 <= int(v) < 2**48,
             "scenario": lambda v: v is None or isinstance(v, Scenario),
             "baseline": lambda v: isinstance(v, str) and v in MECHANISMS,
             "patched": lambda v: isinstance(v, str) and v in MECHANISMS,
             "wrap": lambda v: v is None or callable(v), "observer": lambda v: v is None or callable(v)}[name]
    assume(not valid(bad))
    with pytest.raises((ValueError, TypeError)) as info:
        run_experiment(**{name: bad})
    assert name in str(info.value), str(info.value)


# -- regressions found by the fuzzing above ---------------------------------------------------------------

@pytest.fixture
def world() -> World:
    return World("bdev-devt")


def test_a_numpy_timedelta_is_not_a_page_count(world):
    before = state(world.m)
    with pytest.raises(TypeError, match="pages"):
        world.m.dirty_pages(world.file, np.timedelta64(3), world.a)
    with pytest.raises(TypeError, match="major"):
        mkdev(np.timedelta64(8), 0)
    assert state(world.m) == before


WB_METHODS = [("over_background_thresh", ()), ("flusher_next_work", ()), ("writeback_demand", ()),
              ("writeback_run", (100,)), ("run_writeback_now", ()), ("balance_dirty_pages", (10,)),
              ("flush_foreign", ())]


@pytest.mark.parametrize("method, extra", WB_METHODS, ids=[m for m, _ in WB_METHODS])
def test_methods_taking_a_wb_refuse_anything_else_and_other_models_wbs(world, method, extra):
    # regression: these went straight to wb.lock / wb.active / wb.memcg and raised AttributeError, or
    # worked on a wb of another model (writing, flushing and throttling that model's pages)
    before, other_before = state(world.m), state(world.o)
    fn = getattr(world.m, method)
    for bad in (None, world.disk, world.a, "wb", 3):
        with pytest.raises(TypeError, match="wb"):
            fn(bad, *extra)
    with pytest.raises(ValueError, match="wb"):
        fn(world.entities[-1], *extra)
    assert state(world.m) == before and state(world.o) == other_before


@pytest.mark.parametrize("method, bad, exc", [("writeback_run", -1, ValueError), ("writeback_run", "x", TypeError),
                                              ("writeback_run", None, TypeError),
                                              ("run_writeback_now", 1.5, TypeError)])
def test_wb_methods_check_their_counts(world, method, bad, exc):
    before = state(world.m)
    with pytest.raises(exc, match="max_"):
        if method == "writeback_run":
            world.m.writeback_run(world.wb, bad)
        else:
            world.m.run_writeback_now(world.wb, max_works=bad)
    assert state(world.m) == before


@pytest.mark.parametrize("method", ["hierarchical_dirty", "memcg_domain"])
def test_methods_taking_a_memcg_refuse_anything_else(world, method):
    # regression: AttributeError on memcg.is_root
    for bad in (None, world.disk, "a"):
        with pytest.raises(TypeError, match="memcg"):
            getattr(world.m, method)(bad)
    with pytest.raises(ValueError, match="memcg"):
        getattr(world.m, method)(world.o.root)


@pytest.mark.parametrize("clock", [False, 0, "jiffies", object()])
def test_constructor_refuses_a_clock_that_is_not_a_clock(clock):
    # regression: AttributeError on clock.hz before the clock was checked
    with pytest.raises(TypeError, match="clock"):
        WritebackModel(clock=clock)


@pytest.mark.parametrize("reason", [None, ["x"], 3, {}])
def test_write_pages_with_a_bad_reason_changes_nothing(world, reason):
    # regression: an unhashable reason raised TypeError after the pages had been cleaned and counted
    before = state(world.m)
    with pytest.raises(TypeError, match="reason"):
        world.m.write_pages(world.file, 5, reason=reason)
    assert state(world.m) == before


def test_an_inode_of_another_model_is_refused(world):
    # regression: dirty_pages accepted another model's inode (already attached to that model's wb) and
    # charged its pages to this model's memcg, so this model's dirty total never matched its inodes again
    before, other_before = state(world.m), state(world.o)
    for call in (lambda: world.m.dirty_pages(world.ofile, 2, world.a),
                 lambda: world.m.write_pages(world.ofile, 2), lambda: world.m.discard_pages(world.ofile)):
        with pytest.raises(ValueError, match="inode"):
            call()
    assert state(world.m) == before and state(world.o) == other_before
    check_accounting(world.m)


def test_a_device_of_another_model_is_refused(world):
    # regression: open_device/close_device opened and closed another model's device
    other_before = state(world.o)
    for fn in (world.m.open_device, world.m.close_device):
        with pytest.raises(ValueError, match="device"):
            fn(world.odev)
    assert state(world.o) == other_before


@pytest.mark.parametrize("done", ["done", 1, object()])
def test_cgroup_writeback_by_id_refuses_a_done_that_is_not_a_completion(world, done):
    # regression: AttributeError on done.get()
    before = state(world.m)
    with pytest.raises(TypeError, match="done"):
        world.m.cgroup_writeback_by_id(world.disk.bdi_id, world.a.css_id, done=done)
    assert state(world.m) == before
