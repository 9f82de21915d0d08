"""The v6 cover letter's experiment on simulated time: baseline (owner-wb flushes) against the series
(bdev-mapping flushes), deterministic per seed.

Setup (from the v6 cover letter): a 200 MiB/s disk, 8 GiB of memory, 4 vCPUs; a background task in the root cgroup
rewriting a 256 MiB file with buffered I/O in a loop; a foreground sequential direct writer; four memcgs
whose tasks write small files, dirtying their own data pages and ext4 metadata in the disk's bdev mapping.
The two runs of a pair differ only in the foreign-flush mechanism, and share their random numbers.

Reported per mechanism (mean over runs): background-file write I/O in GiB including the final sync, and the
direct writer's bandwidth, completion time and mean request latency. The numbers come out of the simulation;
the v6 cover letter's numbers (:data:`POSTED_TABLE`) are carried only to print them beside ours.
"""
from __future__ import annotations

import dataclasses
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from ..validate import check_bool, check_callable, check_choice, check_instance, check_int, check_number
from .jiffies import MAX_HZ, SimulatedClock, WritebackTunables
from .model import GiB, KiB, MECHANISMS, MiB, PAGE_SIZE, WritebackModel, mkdev
from .simulation import BufferedOverwriter, CgroupWorkload, DeviceModel, DirectWriter, Simulation
from .workqueue import SimulatedWorkqueue

__all__ = ["Scenario", "RunResult", "ExperimentResult", "run_once", "run_experiment", "POSTED_TABLE", "METRICS",
           "BASELINE", "PATCHED"]

BASELINE = "owner-wb"
PATCHED = "bdev-devt"

METRICS: tuple[tuple[str, str], ...] = (
    ("background_write_gib", "Background file write I/O (GiB)"),
    ("foreground_bandwidth_mib_s", "Foreground bandwidth (MiB/s)"),
    ("foreground_completion_s", "Foreground completion time (s)"),
    ("foreground_mean_latency_ms", "Foreground mean latency (ms)"),
)

#: The table of the v6 cover letter (mean of three runs per kernel), for comparison only.
POSTED_TABLE: dict[str, dict[str, float]] = {
    "baseline": {"background_write_gib": 6.154, "foreground_bandwidth_mib_s": 150.29,
                 "foreground_completion_s": 109.203, "foreground_mean_latency_ms": 212.84},
    "patched": {"background_write_gib": 1.680, "foreground_bandwidth_mib_s": 184.81,
                "foreground_completion_s": 88.652, "foreground_mean_latency_ms": 172.74},
    "change_percent": {"background_write_gib": -72.7, "foreground_bandwidth_mib_s": 23.0,
                       "foreground_completion_s": -18.8, "foreground_mean_latency_ms": -18.8},
}


@dataclass(frozen=True)
class Scenario:
    """Every parameter of the experiment. ``docs/writeback.md`` says where each value comes from.

    Stated by the v6 cover letter: ``device_bandwidth``, ``memory``, ``cpus``, ``background_file_size``, ``cgroups``.
    Derived from the v6 cover letter's table: ``foreground_total`` (bandwidth x completion time = 16.0 GiB in both
    columns), ``foreground_block_size`` x ``foreground_iodepth`` (latency x bandwidth = 32.0 MiB in flight
    in both columns, Little's law). Chosen (the v6 cover letter does not say): everything
    else. ``dirty_expire_centisecs``
    is the sysctl (the kernel's default 30 s); ``background_in_root=False`` puts the background job in a memcg
    of its own (no ``memory.max``) instead of root, for the sensitivity run.
    """

    device_bandwidth: int = 200 * MiB
    memory: int = 8 * GiB
    cpus: int = 4
    background_file_size: int = 256 * MiB
    cgroups: int = 4
    foreground_total: int = 16 * GiB
    foreground_block_size: int = 1 * MiB
    foreground_iodepth: int = 32
    hz: int = 250
    tick_ms: int = 4
    dirtyable_memory: int = 7 * GiB
    background_rate: int = 1 * GiB
    cgroup_memory_max: int = 32 * MiB
    cgroup_ops_rate: float = 64.0
    cgroup_data_pages_per_op: int = 1
    cgroup_metadata_pages_per_op: int = 4
    cgroup_start_jitter: float = 1.0
    writeback_request_bytes: int = 1280 * KiB
    wbt_normal_depth: int = 8
    wbt_background_depth: int = 4
    bdev_slots: int = 4
    max_simulated_seconds: float = 3600.0
    dirty_expire_centisecs: int = 3000
    background_in_root: bool = True

    def __post_init__(self) -> None:
        check_int(self.device_bandwidth, "device_bandwidth", PAGE_SIZE)
        check_int(self.memory, "memory", PAGE_SIZE)
        check_int(self.cpus, "cpus", 1, 256)
        check_int(self.background_file_size, "background_file_size", PAGE_SIZE)
        check_int(self.cgroups, "cgroups", 0, 256)
        check_int(self.foreground_total, "foreground_total", PAGE_SIZE)
        check_int(self.foreground_block_size, "foreground_block_size", 512)
        check_int(self.foreground_iodepth, "foreground_iodepth", 1, 4096)
        check_int(self.hz, "hz", 1, MAX_HZ)
        check_int(self.tick_ms, "tick_ms", 1, 1000)
        check_int(self.dirtyable_memory, "dirtyable_memory", PAGE_SIZE, self.memory)
        check_int(self.background_rate, "background_rate", 0)
        check_int(self.cgroup_memory_max, "cgroup_memory_max", PAGE_SIZE)
        check_number(self.cgroup_ops_rate, "cgroup_ops_rate", 0, open_low=True)
        check_int(self.cgroup_data_pages_per_op, "cgroup_data_pages_per_op", 0, 1 << 20)
        check_int(self.cgroup_metadata_pages_per_op, "cgroup_metadata_pages_per_op", 0, 1 << 20)
        check_number(self.cgroup_start_jitter, "cgroup_start_jitter", 0)
        check_int(self.writeback_request_bytes, "writeback_request_bytes", PAGE_SIZE)
        check_int(self.wbt_normal_depth, "wbt_normal_depth", 1, 4096)
        check_int(self.wbt_background_depth, "wbt_background_depth", 1, 4096)
        check_int(self.bdev_slots, "bdev_slots", 1, 64)
        check_number(self.max_simulated_seconds, "max_simulated_seconds", 0, open_low=True)
        check_int(self.dirty_expire_centisecs, "dirty_expire_centisecs", 1, 10**9)
        check_bool(self.background_in_root, "background_in_root")

    @property
    def tick_jiffies(self) -> int:
        """Jiffies per simulation tick: ``tick_ms`` rounded to whole jiffies, at least one."""
        return max(1, round(self.hz * self.tick_ms / 1000))

    def replace(self, **changes: Any) -> "Scenario":
        """A copy with some parameters changed (validated)."""
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class RunResult:
    """One simulated run of one mechanism."""

    mechanism: str
    effective_mechanism: str
    seed: int
    background_write_bytes: int
    background_sync_bytes: int
    foreground_bytes: int
    foreground_completion_s: float
    foreground_mean_latency_ms: float
    simulated_seconds: float
    ticks: int
    wall_seconds: float
    flushes: dict[str, Any]
    written_by_reason: dict[str, int]
    throttled: int
    foreign_flush_calls: int
    background_written_by_reason: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def background_write_gib(self) -> float:
        return self.background_write_bytes / GiB

    @property
    def foreground_bandwidth_mib_s(self) -> float:
        return self.foreground_bytes / MiB / self.foreground_completion_s

    def metrics(self) -> dict[str, float]:
        """The four table metrics of this run."""
        return {"background_write_gib": self.background_write_gib,
                "foreground_bandwidth_mib_s": self.foreground_bandwidth_mib_s,
                "foreground_completion_s": self.foreground_completion_s,
                "foreground_mean_latency_ms": self.foreground_mean_latency_ms}

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out.update(self.metrics())
        return out


def _flush_summary(model: WritebackModel) -> dict[str, Any]:
    s = model.stats
    owner_pages = s.owner_wb_flush_pages
    bdev_pages = s.bdev_flush_pages
    flushes = s.owner_wb_flushes + s.bdev_flushes_queued
    by_target: dict[str, int] = dict(s.owner_wb_flush_pages_by_label)
    if bdev_pages:
        by_target["bdev mapping"] = by_target.get("bdev mapping", 0) + bdev_pages
    return {
        "mechanism": model.mechanism,
        "foreign_flushes": flushes,
        "pages_written": owner_pages + bdev_pages,
        "pages_per_flush": (owner_pages + bdev_pages) / flushes if flushes else 0.0,
        "pages_by_target": by_target,
        "owner_wb_flushes": s.owner_wb_flushes,
        "owner_wb_flush_pages": owner_pages,
        "bdev_flushes": s.bdev_flushes_queued,
        "bdev_flushes_that_wrote": s.bdev_flushes_wrote,
        "bdev_flush_pages": bdev_pages,
        "bdev_skipped_busy": s.bdev_skipped_busy,
        "bdev_skipped_closed": s.bdev_skipped_closed,
        "bdev_skipped_absent": s.bdev_skipped_absent,
    }


def _rng_seed(seed: int, *parts: int) -> int:
    value = seed & 0xFFFFFFFFFFFF
    for part in parts:
        value = (value * 1_000_003 + part + 1) & 0x7FFFFFFFFFFFFFFF
    return value


def run_once(mechanism: str, scenario: Scenario | None = None, *, seed: int = 0,
             workqueue_fails: bool = False, observer: Callable[[Simulation], None] | None = None) -> RunResult:
    """Simulate one run of the experiment with one mechanism.

    :param mechanism: ``"owner-wb"`` (baseline), ``"bdev-devt"`` (the series) or ``"bdev-ref"``.
    :param scenario: the parameters; default :class:`Scenario`\\ ().
    :param seed: >= 0; the same seed gives the same result, and the same workload for every mechanism.
    :param workqueue_fails: make the flush workqueue's allocation fail (the bdev mechanisms then fall back).
    :param observer: called with the :class:`Simulation` after every tick (read-only; for timelines), or None.
        It sees the foreground phase only, not the final sync.
    :raises RuntimeError: if the direct writer does not finish within ``max_simulated_seconds``.
    """
    mechanism = check_choice(mechanism, "mechanism", MECHANISMS)
    scenario = Scenario() if scenario is None else scenario
    check_instance(scenario, "scenario", Scenario, "a Scenario")
    seed = check_int(seed, "seed", 0, (1 << 63) - 1)
    check_bool(workqueue_fails, "workqueue_fails")
    wall0 = time.perf_counter()

    tunables = WritebackTunables(hz=scenario.hz, dirty_expire_centisecs=scenario.dirty_expire_centisecs)
    clock = SimulatedClock(scenario.hz)
    factory: Callable[[], Any] = ((lambda: None) if workqueue_fails
                                  else (lambda: SimulatedWorkqueue(max_active=scenario.cpus)))
    model = WritebackModel(mechanism=mechanism, clock=clock, tunables=tunables,
                           dirtyable_memory=scenario.dirtyable_memory, bdev_slots=scenario.bdev_slots,
                           workqueue_factory=factory)
    disk = model.add_disk("vda", scenario.device_bandwidth)
    device = model.add_block_device(mkdev(253, 0), disk)
    model.open_device(device)   # the ext4 filesystem is mounted: the device stays open
    # Mounting dirties the superblock from root: the bdev inode is attached to root's wb from then on.
    model.dirty_pages(device.mapping, 1, model.root)
    model.write_pages(device.mapping, 1, reason="mount")

    background = model.create_inode(disk, "background/file", size=scenario.background_file_size,
                                    label="background file")
    background_memcg = model.root if scenario.background_in_root else model.create_memcg("background")
    overwriter = BufferedOverwriter(model, background_memcg, background, scenario.background_rate)
    workloads: list[CgroupWorkload] = []
    for i in range(scenario.cgroups):
        rng = random.Random(_rng_seed(seed, i))
        memcg = model.create_memcg(f"cg{i}", memory_max=scenario.cgroup_memory_max)
        files = model.create_inode(disk, f"cg{i}/files", label="cgroup files")
        workloads.append(CgroupWorkload(model, memcg, files, device.mapping,
                                        ops_rate=scenario.cgroup_ops_rate,
                                        data_pages_per_op=scenario.cgroup_data_pages_per_op,
                                        metadata_pages_per_op=scenario.cgroup_metadata_pages_per_op,
                                        rng=rng, start=rng.uniform(0.0, scenario.cgroup_start_jitter)))
    direct = DirectWriter(scenario.foreground_total, scenario.foreground_block_size, scenario.foreground_iodepth)
    direct.start(0.0)
    dev = DeviceModel(float(scenario.device_bandwidth), scenario.writeback_request_bytes,
                      scenario.wbt_normal_depth, scenario.wbt_background_depth)
    sim = Simulation(model, dev, tick_jiffies=scenario.tick_jiffies, direct=direct,
                     overwriters=[overwriter], workloads=workloads, observer=observer)
    sim.run_until_direct_done(scenario.max_simulated_seconds)
    if not direct.done or direct.completion_time is None:
        raise RuntimeError(f"the foreground writer did not finish within {scenario.max_simulated_seconds} "
                           "simulated seconds")
    # The foreground job is done: the background job stops and the final sync writes what is dirty.
    before_sync = background.written
    model.sync_all()
    background_sync = background.written - before_sync
    model.shutdown(drain=False)
    stats = model.stats
    return RunResult(
        mechanism=mechanism,
        effective_mechanism=model.mechanism,
        seed=seed,
        background_write_bytes=background.written * PAGE_SIZE,
        background_sync_bytes=background_sync * PAGE_SIZE,
        foreground_bytes=direct.total_bytes,
        foreground_completion_s=direct.completion_time - direct.start_time,
        foreground_mean_latency_ms=direct.mean_latency * 1000.0,
        simulated_seconds=clock.elapsed_seconds,
        ticks=sim.ticks,
        wall_seconds=time.perf_counter() - wall0,
        flushes=_flush_summary(model),
        written_by_reason=dict(stats.written_by_reason),
        throttled=stats.throttled,
        foreign_flush_calls=stats.foreign_flush_calls,
        background_written_by_reason=dict(background.written_by_reason),
    )


@dataclass
class ExperimentResult:
    """Baseline and patched runs and their means (the v6 cover letter's table)."""

    runs: int
    seed: int
    scenario: Scenario
    baseline_runs: list[RunResult]
    patched_runs: list[RunResult]
    wall_seconds: float = 0.0
    baseline_mechanism: str = BASELINE
    patched_mechanism: str = PATCHED

    @staticmethod
    def _mean(results: Sequence[RunResult]) -> dict[str, float]:
        keys = [key for key, _ in METRICS]
        return {key: sum(r.metrics()[key] for r in results) / len(results) for key in keys}

    @property
    def baseline(self) -> dict[str, float]:
        """Mean metrics of the baseline runs."""
        return self._mean(self.baseline_runs)

    @property
    def patched(self) -> dict[str, float]:
        """Mean metrics of the patched runs."""
        return self._mean(self.patched_runs)

    @property
    def change_percent(self) -> dict[str, float]:
        """(patched - baseline) / baseline, in percent, per metric."""
        base, pat = self.baseline, self.patched
        return {key: (pat[key] - base[key]) / base[key] * 100.0 for key, _ in METRICS}

    @staticmethod
    def _flushes(results: Sequence[RunResult]) -> dict[str, Any]:
        n = len(results)
        flushes = sum(r.flushes["foreign_flushes"] for r in results)
        pages = sum(r.flushes["pages_written"] for r in results)
        by_target: dict[str, float] = {}
        for r in results:
            for label, count in r.flushes["pages_by_target"].items():
                by_target[label] = by_target.get(label, 0) + count
        return {
            "mechanism": results[0].flushes["mechanism"],
            "foreign_flushes_per_run": flushes / n,
            "pages_written_per_run": pages / n,
            "pages_per_flush": pages / flushes if flushes else 0.0,
            "mib_per_flush": pages * PAGE_SIZE / MiB / flushes if flushes else 0.0,
            "pages_by_target_per_run": {label: count / n for label, count in sorted(by_target.items())},
            "bdev_skipped_busy_per_run": sum(r.flushes["bdev_skipped_busy"] for r in results) / n,
            "throttle_events_per_run": sum(r.throttled for r in results) / n,
            "background_sync_gib_per_run": sum(r.background_sync_bytes for r in results) / n / GiB,
            "background_file_gib_by_writer_per_run": {
                reason: sum(r.background_written_by_reason.get(reason, 0) for r in results) * PAGE_SIZE / GiB / n
                for reason in sorted({k for r in results for k in r.background_written_by_reason})},
        }

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` document."""
        return {
            "runs": self.runs,
            "seed": self.seed,
            "baseline": self.baseline,
            "patched": self.patched,
            "change_percent": self.change_percent,
            "flushes": {"baseline": self._flushes(self.baseline_runs),
                        "patched": self._flushes(self.patched_runs)},
            "posted_table": POSTED_TABLE,
            "mechanisms": {"baseline": self.baseline_mechanism, "patched": self.patched_mechanism},
            "per_run": {"baseline": [r.as_dict() for r in self.baseline_runs],
                        "patched": [r.as_dict() for r in self.patched_runs]},
            "scenario": self.scenario.as_dict(),
            "wall_seconds": self.wall_seconds,
        }


def _bind(observer: Callable[[str, int, Simulation], None] | None, mechanism: str,
          index: int) -> Callable[[Simulation], None] | None:
    """A per-run observer calling ``observer(mechanism, index, sim)``, or None."""
    if observer is None:
        return None
    return lambda sim: observer(mechanism, index, sim)


def run_experiment(runs: int = 3, seed: int = 0, scenario: Scenario | None = None, *,
                   baseline: str = BASELINE, patched: str = PATCHED,
                   wrap: Callable[[Iterable[int]], Iterable[int]] | None = None,
                   observer: Callable[[str, int, Simulation], None] | None = None) -> ExperimentResult:
    """Run the experiment ``runs`` times per mechanism and collect the table.

    Run ``i`` of both mechanisms uses the same derived seed, so each pair sees the same workload.

    :param runs: runs per mechanism, 1..1000; default 3 (as the v6 cover letter).
    :param seed: base seed, >= 0; default 0.
    :param scenario: the parameters; default :class:`Scenario`\\ ().
    :param baseline: the baseline mechanism; default ``"owner-wb"``.
    :param patched: the patched mechanism; default ``"bdev-devt"``.
    :param wrap: optional wrapper of the run-index iterable (a progress bar).
    :param observer: optional ``(mechanism, run_index, simulation)`` called after every tick of every run
        (read-only; ``pybcache report`` records run 0's timeline with it).
    """
    runs = check_int(runs, "runs", 1, 1000)
    check_callable(observer, "observer", allow_none=True)
    check_callable(wrap, "wrap", allow_none=True)
    seed = check_int(seed, "seed", 0, (1 << 48) - 1)
    baseline = check_choice(baseline, "baseline", MECHANISMS)
    patched = check_choice(patched, "patched", MECHANISMS)
    scenario = Scenario() if scenario is None else scenario
    check_instance(scenario, "scenario", Scenario, "a Scenario")
    wall0 = time.perf_counter()
    base_results: list[RunResult] = []
    patched_results: list[RunResult] = []
    indices: Iterable[int] = range(runs)
    if wrap is not None:
        indices = wrap(indices)
    for i in indices:
        run_seed = _rng_seed(seed, 7919, i)
        base_results.append(run_once(baseline, scenario, seed=run_seed, observer=_bind(observer, baseline, i)))
        patched_results.append(run_once(patched, scenario, seed=run_seed, observer=_bind(observer, patched, i)))
    return ExperimentResult(runs, seed, scenario, base_results, patched_results,
                            wall_seconds=time.perf_counter() - wall0,
                            baseline_mechanism=baseline, patched_mechanism=patched)
