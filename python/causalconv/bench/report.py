"""Reporting: the case list, progress lines, the summary table, results.json and results.png.

Everything here works on the plain dicts that ``harness.run_case`` returns, so it
can be exercised without a GPU.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional, Sequence

from .cases import DTYPE_NAME, Case


def format_case_list(cases: Sequence[Case]) -> str:
    width = max(len(c.name) for c in cases)
    return "\n".join(
        f"{c.name:<{width}}  {c.family:<10} {DTYPE_NAME[c.dtype]:<5}"
        f" {c.bytes_moved / 1e6:9.1f} MB {c.flops / 1e9:8.2f} GFLOP"
        f"  baselines: {', '.join(c.baselines) or '-'}{'  [quick]' if c.quick else ''}"
        for c in cases)


def verdict(result: dict) -> str:
    if "error" in result:
        return "FAIL (error)"
    word = "PASS" if result["passed"] else "FAIL"
    return f"{word} ({result['note']})" if result.get("note") else word


def progress_line(step: int, total: int, case_name: str, impl: str, result: dict) -> str:
    head = f"[{step}/{total}] {case_name}: {impl} "
    if not result["available"]:
        return head + f"n/a ({result['reason']})"
    if "error" in result:
        return head + f"FAIL ({result['error']})"
    return head + (f"{result['ms']:.3f} ms, {result['gbps']:.0f} GB/s ({result['pct_copy']:.1f}% of copy),"
                   f" rel L2 {_num(result['rel_l2'], '.1e')}, {verdict(result)}")


def format_table(report: dict) -> str:
    """A Markdown table: one row per case; speedup = baseline ms / ours ms."""
    baselines = list(dict.fromkeys(b for c in report["cases"] for b in c["results"] if b != "ours"))
    header = ["case", "ours ms", "GB/s", "% copy", *(f"vs {b} (ms)" for b in baselines), "rel L2", "verdict"]
    rows = [header] + [_row(case, baselines) for case in report["cases"]]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]

    def line(cells: List[str]) -> str:
        # The case name and verdict read left to right; numbers line up on the right.
        padded = [c.ljust(w) if i in (0, len(cells) - 1) else c.rjust(w)
                  for i, (c, w) in enumerate(zip(cells, widths))]
        return "| " + " | ".join(padded) + " |"

    rule = ["-" * w if i in (0, len(header) - 1) else "-" * (w - 1) + ":" for i, w in enumerate(widths)]
    title = (f"{report['device']}: copy bandwidth {report['copy_bandwidth_gbps']:.0f} GB/s;"
             f" speedup = baseline ms / ours ms")
    return "\n".join([title, "", line(header), line(rule), *(line(r) for r in rows[1:])])


def _row(case: dict, baselines: List[str]) -> List[str]:
    ours = case["results"]["ours"]
    return [case["name"], _num(ours.get("ms"), ".3f"), _num(ours.get("gbps"), ".0f"),
            _num(ours.get("pct_copy"), ".1f"),
            *(_speedup(ours.get("ms"), case["results"].get(b)) for b in baselines),
            _num(ours.get("rel_l2"), ".1e"), verdict(ours)]


def _speedup(ours_ms: Optional[float], baseline: Optional[dict]) -> str:
    if baseline is None or not baseline["available"]:
        return "n/a"
    if "ms" not in baseline:
        return "error"
    ratio = f"{baseline['ms'] / ours_ms:.2f}x" if ours_ms else "-"
    failed = "" if baseline.get("passed", True) else ", fails check"
    return f"{ratio} ({baseline['ms']:.3f}{failed})"


def _num(value: Optional[float], spec: str) -> str:
    return "-" if value is None else format(value, spec)


def write_json(report: dict, path: Path) -> None:
    path.write_text(json.dumps(report, indent=2) + "\n")


def write_chart(report: dict, path: Path) -> bool:
    """Grouped bars of % of copy bandwidth per case; False when matplotlib is absent."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    cases = report["cases"]
    impls = list(dict.fromkeys(i for c in cases for i in c["results"]))
    bar = 0.8 / len(impls)
    fig, ax = plt.subplots(figsize=(max(6.0, 2.2 * len(cases)), 4.5))
    for k, impl in enumerate(impls):
        values = [c["results"].get(impl, {}).get("pct_copy") for c in cases]
        bars = ax.bar([i + (k - (len(impls) - 1) / 2) * bar for i in range(len(cases))],
                      [v or 0.0 for v in values], bar, label=impl)
        ax.bar_label(bars, ["n/a" if v is None else f"{v:.0f}" for v in values], fontsize=7)
    ax.axhline(100, color="gray", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels([c["name"].replace(" B", "\nB", 1) for c in cases], fontsize=8)
    ax.set_ylabel("% of measured copy bandwidth")
    ax.set_title(f"{report['device']}: measured copy bandwidth {report['copy_bandwidth_gbps']:.0f} GB/s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
