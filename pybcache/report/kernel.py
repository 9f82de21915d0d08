"""The real driver: ``pybcache kernel compare``'s table, the lab held against Linux 6.12's bcache under UML.

With ``pybcache report --kernel`` the section runs the comparison (it builds the kernels it needs: minutes);
without it the section shows the last comparison saved in the kernel cache, saying when it was measured, or
says in one line how to get one, so that the main job does not grow by minutes unasked.
"""
from __future__ import annotations

from typing import Any, Optional

from ._common import ReportContext, table
from ._template import render

__all__ = ["kernel"]


def kernel(ctx: ReportContext) -> str:
    from ..kernel.compare import compare_table, saved_compare
    lines = [render("kernel.intro"), ""]
    result: Optional[dict[str, Any]]
    if ctx.kernel:
        from ..kernel.compare import run_compare
        result = run_compare(tries=3 if ctx.quick else 5, stress_seconds=10 if ctx.quick else 20,
                             progress=lambda text, done, total: ctx.note(f"kernel: {text}"))
        how = render("kernel.ran", seconds=result["seconds"])
    else:
        result = saved_compare()
        if result is None:
            ctx.results["kernel"] = None
            return "\n".join(lines + [render("kernel.none"), ""]) + "\n"
        how = render("kernel.saved", measured=result["measured"])
    headers, rows = compare_table(result)
    lines += [how, "", table(headers, rows), ""]
    for row in result["rows"]:
        for r in row["kernel"]["race"]["reports"] + (row["kernel"]["stress"] or {}).get("reports", []):
            lines.append(f"- {row['config']}: {r['kind']}: `{r['head'].replace('`', '')}`")
    disagree = result["disagreements"]
    lines += ["", render("kernel.disagree", rows=", ".join(disagree)) if disagree else render("kernel.agree"), ""]
    ctx.results["kernel"] = result
    return "\n".join(lines) + "\n"
