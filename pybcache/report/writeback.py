"""memcg foreign-bdev writeback: our table next to the v6 cover letter's, the timeline, dev_t churn and
sensitivity."""
from __future__ import annotations

from typing import Any

from ..units import GiB, MiB
from ._common import ReportContext, table
from ._template import render

__all__ = ["writeback"]


class _Timeline:
    """Records dirty pages and device bytes by source from the simulation observer, in fixed time bins."""

    def __init__(self, bin_s: float) -> None:
        self.bin_s = bin_s
        self.next_t = bin_s
        self.t: list[float] = []
        self.dirty: dict[str, list[float]] = {}
        self.bw: dict[str, list[float]] = {}
        self.prev: dict[str, float] = {}

    @staticmethod
    def _sources(sim: Any) -> dict[str, float]:
        out = {"foreground direct I/O": float(sim.direct.served) if sim.direct is not None else 0.0}
        for inode in sim.model.inodes:
            if inode.label == "background file":
                ff = inode.written_by_reason.get("foreign_flush", 0)
                out["background file: owner-wb foreign flush"] = (
                    out.get("background file: owner-wb foreign flush", 0.0) + ff * 4096.0)
                out["background file: other writeback"] = (
                    out.get("background file: other writeback", 0.0) + (inode.written - ff) * 4096.0)
            else:
                key = "bdev mapping (metadata)" if inode.label == "bdev mapping" else inode.label
                out[key] = out.get(key, 0.0) + inode.written * 4096.0
        return out

    def __call__(self, sim: Any) -> None:
        now = sim.clock.elapsed_seconds
        if now + 1e-9 < self.next_t:
            return
        self.next_t += self.bin_s
        cur = self._sources(sim)
        span = now - (self.t[-1] if self.t else 0.0)
        for k, v in cur.items():
            self.bw.setdefault(k, [0.0] * len(self.t)).append((v - self.prev.get(k, 0.0)) / MiB / span)
        self.prev = cur
        dirty: dict[str, float] = {"all dirty pages": float(sim.model.nr_dirty)}
        for inode in sim.model.inodes:
            dirty[inode.label] = dirty.get(inode.label, 0.0) + float(inode.dirty)
        for k, v in dirty.items():
            self.dirty.setdefault(k, [0.0] * len(self.t)).append(v * 4096 / MiB)
        self.t.append(now)

    def as_dict(self) -> dict[str, Any]:
        return {"t": self.t, "dirty_mib": self.dirty, "bandwidth_mib_s": self.bw}


def writeback(ctx: ReportContext) -> str:
    from ..writeback import METRICS, POSTED_TABLE as WB_POSTED, Scenario, compare_churn, run_experiment
    runs = 1 if ctx.quick else 3
    bin_s = 0.25 if ctx.quick else 1.0
    scenario = Scenario(foreground_total=2 * GiB) if ctx.quick else Scenario()
    timelines: dict[str, _Timeline] = {}

    def observe(mechanism: str, index: int, sim: Any) -> None:
        if index == 0:
            timelines.setdefault(mechanism, _Timeline(bin_s))(sim)

    ctx.note("writeback")
    result = run_experiment(runs, ctx.seed, scenario, observer=observe)
    doc = result.as_dict()
    doc.pop("per_run", None)
    ctx.note("writeback: churn")
    churn = {k: v.as_dict() for k, v in compare_churn(seed=ctx.seed).items()}
    ctx.results["writeback"] = doc
    ctx.results["churn"] = churn
    base, pat, change = result.baseline, result.patched, result.change_percent
    digits = {"background_write_gib": 3, "foreground_bandwidth_mib_s": 2, "foreground_completion_s": 3,
              "foreground_mean_latency_ms": 2}
    rows = [[label, f"{base[k]:.{digits[k]}f}", f"{pat[k]:.{digits[k]}f}", f"{change[k]:+.1f}%",
             f"{WB_POSTED['baseline'][k]:.{digits[k]}f}", f"{WB_POSTED['patched'][k]:.{digits[k]}f}",
             f"{WB_POSTED['change_percent'][k]:+.1f}%"] for k, label in METRICS]
    from .plots import plot_writeback_timeline
    names = {result.baseline_mechanism: f"baseline ({result.baseline_mechanism})",
             result.patched_mechanism: f"patched ({result.patched_mechanism})"}
    plot_writeback_timeline({names[m]: tl.as_dict() for m, tl in timelines.items()},
                            ctx.plot("writeback_timeline.png", "writeback timeline: dirty pages and device bandwidth "
                                     "by source, baseline vs patched"))
    ctx.results["writeback_timeline"] = {names[m]: tl.as_dict() for m, tl in timelines.items()}
    main = render(
        "writeback.main", foreground_gib=scenario.foreground_total // GiB, runs=runs, seed=ctx.seed,
        quick_note=render("writeback.quick_note") if ctx.quick else "",
        table=table(["metric", "baseline", "patched", "change", "posted baseline", "posted patched", "posted change"],
                    rows),
        base=doc["flushes"]["baseline"], patched=doc["flushes"]["patched"], devt=churn["bdev-devt"],
        ref=churn["bdev-ref"], bin_s=bin_s)
    return main + "\n\n" + _sensitivity(ctx, scenario) + "\n\n"


def _sensitivity(ctx: ReportContext, scenario: Any) -> str:
    from ..writeback import HOLDS_PERCENT, QUICK_SENSITIVITY, SENSITIVITY, VANISHES_PERCENT, run_sensitivity, \
        summary_text
    ctx.note("writeback: sensitivity")
    result = run_sensitivity(1, ctx.seed, scenario, perturbations=QUICK_SENSITIVITY if ctx.quick else SENSITIVITY)
    doc = result.as_dict()
    ctx.results["writeback_sensitivity"] = doc
    rows = [[r["name"], f"{r['baseline']['background_write_gib']:.2f} / {r['patched']['background_write_gib']:.2f}",
             f"{r['change_percent']['background_write_gib']:+.1f}%",
             f"{r['baseline']['foreground_bandwidth_mib_s']:.1f} / {r['patched']['foreground_bandwidth_mib_s']:.1f}",
             f"{r['change_percent']['foreground_bandwidth_mib_s']:+.1f}%",
             f"{r['change_percent']['foreground_completion_s']:+.1f}%",
             f"{r['change_percent']['foreground_mean_latency_ms']:+.1f}%", r["verdict"]] for r in doc["rows"]]
    from .plots import plot_writeback_sensitivity
    plot_writeback_sensitivity(doc["rows"], ctx.plot("writeback_sensitivity.png",
                                                     "writeback sensitivity: the patched kernel's change per "
                                                     "perturbation"),
                               holds_percent=HOLDS_PERCENT, vanishes_percent=VANISHES_PERCENT)
    return render(
        "writeback.sensitivity", runs=1, seed=ctx.seed,
        quick=render("writeback.sensitivity_quick") if ctx.quick else "", holds=HOLDS_PERCENT,
        vanishes=VANISHES_PERCENT,
        table=table(["perturbation", "background GiB base / patched", "change", "foreground MiB/s base / patched",
                     "change", "completion", "latency", "effect"], rows),
        summary=summary_text(result))
