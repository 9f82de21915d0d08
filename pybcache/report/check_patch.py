"""check-patch: the battery of ``pybcache check-patch`` on each shipped example patch (issue #12).

Its prose is in ``templates/check_patch.md``; :mod:`pybcache.bcache.kpatch.check` is imported when the
section runs.
"""
from __future__ import annotations

from ._common import ReportContext, table
from ._template import render

__all__ = ["check_patch", "PATCH_EXAMPLES"]

#: The shipped example patches the check-patch section runs (found beside the package in a source tree).
PATCH_EXAMPLES = ("v2_posted", "v3_proposal", "v3_atomic")


def check_patch(ctx: ReportContext) -> str:
    """The check-patch battery on each shipped example patch: one table per example (check, passed,
    figure) and the battery's wall time."""
    from ..bcache.kpatch.check.runner import check_patch as run_battery
    from .._csrc import example_patches
    shipped = example_patches()
    lines = [render("check_patch.intro",
                    stress=render("check_patch.stress_quick" if ctx.quick else "check_patch.stress_full")), ""]
    results = {}
    for name in PATCH_EXAMPLES:
        path = shipped.get(name)
        if path is None:
            lines += [render("check_patch.not_found", name=name), ""]
            continue
        ctx.note(f"check-patch: {name}")
        res = run_battery(path, seconds=0.5 if ctx.quick else 2.0)
        results[name] = res.to_json()
        lines += [render("check_patch.example", name=name, patch=res.name,
                         passed=sum(c.passed for c in res.checks), total=len(res.checks), wall_s=res.wall_s,
                         table=table(["check", "passed", "figure"],
                                     [[c.name, "yes" if c.passed else "**FAILED**", c.figure.replace("|", "/")]
                                      for c in res.checks])), ""]
        for c in res.checks:
            if not c.passed and c.counterexample:
                lines += [render("check_patch.counterexample", check=c.name, steps="\n".join(
                    f"{i}. {x}" for i, x in enumerate(c.counterexample, 1))), ""]
    ctx.results["check_patch"] = results
    return "\n".join(lines) + "\n"
