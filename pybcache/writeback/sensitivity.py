"""Where the v6 table's effect holds and where it vanishes: the experiment rerun with one condition changed.

Each :class:`Perturbation` changes some :class:`~pybcache.writeback.experiment.Scenario` fields; for each, the
baseline and patched kernels run on the same seeds and the row records the four metrics' change in percent.
Every row's verdict comes from its measured background-write reduction against two thresholds stated in the
output (:data:`HOLDS_PERCENT`, :data:`VANISHES_PERCENT`), never from a list written down in advance.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from ..validate import check_callable, check_instance, check_int
from .experiment import METRICS, Scenario, run_experiment
from .model import MiB

__all__ = ["Perturbation", "SENSITIVITY", "QUICK_SENSITIVITY", "HOLDS_PERCENT", "VANISHES_PERCENT",
           "FOREGROUND_GAIN_PERCENT", "SensitivityResult", "run_sensitivity", "verdict", "summary_text"]

#: The effect holds where the patched kernel cuts the background file's write I/O by at least this (percent).
HOLDS_PERCENT = 50.0
#: The effect vanishes where that cut is smaller than this (percent); in between it is weakened.
VANISHES_PERCENT = 10.0
#: A row's foreground gain is called small below this bandwidth increase (percent).
FOREGROUND_GAIN_PERCENT = 5.0


@dataclass(frozen=True)
class Perturbation:
    """One change to the experiment: a name for tables and the :class:`Scenario` fields it sets."""

    name: str
    params: tuple[tuple[str, Any], ...] = field(default=())

    @classmethod
    def of(cls, name: str, **params: Any) -> "Perturbation":
        return cls(str(name), tuple(sorted(params.items())))

    def apply(self, scenario: Scenario) -> Scenario:
        """``scenario`` with this perturbation's fields set (validated by :class:`Scenario`)."""
        return scenario.replace(**dict(self.params))


#: The full set: the device, the foreground job, write-back throttling and dirty expiry moved both ways; the
#: calibrated memcg pressure (memory.max, op rate) lowered, alone and together; the background job's memcg;
#: the number of memcgs both ways.
SENSITIVITY: tuple[Perturbation, ...] = (
    Perturbation.of("defaults"),
    Perturbation.of("device bandwidth 100 MiB/s", device_bandwidth=100 * MiB),
    Perturbation.of("device bandwidth 400 MiB/s", device_bandwidth=400 * MiB),
    Perturbation.of("foreground iodepth 8", foreground_iodepth=8),
    Perturbation.of("foreground iodepth 128", foreground_iodepth=128),
    Perturbation.of("wbt depths halved (4 / 2)", wbt_normal_depth=4, wbt_background_depth=2),
    Perturbation.of("wbt depths doubled (16 / 8)", wbt_normal_depth=16, wbt_background_depth=8),
    Perturbation.of("dirty expiry 15 s", dirty_expire_centisecs=1500),
    Perturbation.of("dirty expiry 60 s", dirty_expire_centisecs=6000),
    Perturbation.of("memory.max 64 MiB", cgroup_memory_max=64 * MiB),
    Perturbation.of("op rate 32/s", cgroup_ops_rate=32.0),
    Perturbation.of("memory.max 64 MiB and op rate 32/s", cgroup_memory_max=64 * MiB, cgroup_ops_rate=32.0),
    Perturbation.of("background job in its own memcg", background_in_root=False),
    Perturbation.of("1 memcg", cgroups=1),
    Perturbation.of("8 memcgs", cgroups=8),
)

#: The report's quick mode: the defaults, a deeper foreground queue and the background job in its own memcg
#: (perturbations that do not shorten the quick mode's already short run; whatever they give is measured).
QUICK_SENSITIVITY: tuple[Perturbation, ...] = (
    Perturbation.of("defaults"),
    Perturbation.of("foreground iodepth 128", foreground_iodepth=128),
    Perturbation.of("background job in its own memcg", background_in_root=False),
)


def verdict(change_percent: dict[str, float]) -> str:
    """``"holds"``, ``"weakened"`` or ``"vanishes"`` from a row's background-write change."""
    reduction = -change_percent["background_write_gib"]
    if reduction >= HOLDS_PERCENT:
        return "holds"
    if reduction >= VANISHES_PERCENT:
        return "weakened"
    return "vanishes"


@dataclass
class SensitivityResult:
    """One row per perturbation: its parameters, both kernels' mean metrics and the change in percent."""

    runs: int
    seed: int
    base_scenario: Scenario
    rows: list[dict[str, Any]]
    wall_seconds: float = 0.0

    def by_verdict(self) -> dict[str, list[dict[str, Any]]]:
        """The rows grouped by verdict (each list in run order)."""
        out: dict[str, list[dict[str, Any]]] = {"holds": [], "weakened": [], "vanishes": []}
        for row in self.rows:
            out[row["verdict"]].append(row)
        return out

    def small_foreground_gain(self) -> list[dict[str, Any]]:
        """The rows whose foreground bandwidth gain is below :data:`FOREGROUND_GAIN_PERCENT`."""
        return [row for row in self.rows
                if row["change_percent"]["foreground_bandwidth_mib_s"] < FOREGROUND_GAIN_PERCENT]

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` document."""
        return {"rows": self.rows, "runs": self.runs, "seed": self.seed,
                "thresholds": {"holds_background_reduction_percent": HOLDS_PERCENT,
                               "vanishes_background_reduction_percent": VANISHES_PERCENT,
                               "small_foreground_gain_percent": FOREGROUND_GAIN_PERCENT},
                "base_scenario": self.base_scenario.as_dict(), "wall_seconds": self.wall_seconds}


def run_sensitivity(runs: int = 1, seed: int = 0, scenario: Scenario | None = None, *,
                    perturbations: Sequence[Perturbation] = SENSITIVITY,
                    wrap: Callable[[Iterable[Any]], Iterable[Any]] | None = None
                    ) -> SensitivityResult:
    """Run the baseline/patched experiment once per perturbation of ``scenario``.

    :param runs: runs per kernel and perturbation, 1..1000; default 1.
    :param seed: base seed, >= 0; default 0. Every perturbation uses the same seeds.
    :param scenario: what is perturbed; default :class:`Scenario`\\ ().
    :param perturbations: the rows; default :data:`SENSITIVITY`.
    :param wrap: optional wrapper of the iterable of (perturbation, scenario) pairs (a progress bar).
    """
    runs = check_int(runs, "runs", 1, 1000)
    seed = check_int(seed, "seed", 0, (1 << 48) - 1)
    scenario = Scenario() if scenario is None else check_instance(scenario, "scenario", Scenario, "a Scenario")
    perturbations = tuple(perturbations)
    if not perturbations:
        raise ValueError("perturbations must hold at least one Perturbation")
    for p in perturbations:
        check_instance(p, "perturbations", Perturbation, "a sequence of Perturbation")
    check_callable(wrap, "wrap", allow_none=True)
    scenarios = [p.apply(scenario) for p in perturbations]   # every perturbation is valid before any runs
    wall0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    pairs: Iterable[tuple[Perturbation, Scenario]] = list(zip(perturbations, scenarios))
    if wrap is not None:
        pairs = wrap(pairs)
    for p, perturbed in pairs:
        result = run_experiment(runs, seed, perturbed)
        change = result.change_percent
        rows.append({"name": p.name, "params": dict(p.params),
                     "change_percent": {key: change[key] for key, _ in METRICS},
                     "baseline": result.baseline, "patched": result.patched,
                     "verdict": verdict(change)})
    return SensitivityResult(runs, seed, scenario, rows, wall_seconds=time.perf_counter() - wall0)



_SUMMARY = ("The patched kernel cuts the background file's write I/O by at least {holds_pct:g} % in {n_holds} of "
            "{n_rows} rows ({holds}). It is weakened ({vanish_pct:g}-{holds_pct:g} %) in: {weakened}. It vanishes "
            "(under {vanish_pct:g} %) in: {vanishes}. The foreground bandwidth gain is under {fg_pct:g} % in: "
            "{small_fg}.")


def _cite(rows: Sequence[dict[str, Any]], key: str) -> str:
    if not rows:
        return "none"
    return "; ".join(f"{row['name']} ({row['change_percent'][key]:+.1f} %)" for row in rows)


def summary_text(result: SensitivityResult) -> str:
    """Where the effect holds and where it vanishes, as one paragraph derived from ``result``'s rows."""
    groups = result.by_verdict()
    return _SUMMARY.format(
        holds_pct=HOLDS_PERCENT, vanish_pct=VANISHES_PERCENT, fg_pct=FOREGROUND_GAIN_PERCENT,
        n_holds=len(groups["holds"]), n_rows=len(result.rows),
        holds=_range(groups["holds"]),
        weakened=_cite(groups["weakened"], "background_write_gib"),
        vanishes=_cite(groups["vanishes"], "background_write_gib"),
        small_fg=_cite(result.small_foreground_gain(), "foreground_bandwidth_mib_s"))


def _range(rows: Sequence[dict[str, Any]]) -> str:
    if not rows:
        return "no row"
    cuts = [row["change_percent"]["background_write_gib"] for row in rows]
    if len(cuts) == 1:
        return f"{rows[0]['name']}, {cuts[0]:+.1f} %"
    return f"changes from {max(cuts):+.1f} % to {min(cuts):+.1f} %"
