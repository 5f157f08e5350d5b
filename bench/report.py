"""Stock-vs-overlay report over pytest-benchmark JSON files written in pairs by compare.py.

Per benchmark, each pair gives the ratio overlay median / stock median (or another statistic); the table shows
every per-pair ratio, their median and a 95% bootstrap interval of that median (resampling the pairs). The
verdict: PASS when the whole interval is at or below the threshold, FAIL when it is above, INCONCLUSIVE when it
spans the threshold, with the pairs a run would need to decide at the spread seen.  Groups are named ``workload/measure/target``
(conftest.py), so "compile" and "exec" benchmarks get their own thresholds.  The ``chain-N``
workloads also give a compile-time scaling table and a log-log plot.
"""

from __future__ import annotations

import json
import math
import random
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Row:
    workload: str
    measure: str
    target: str
    stock: list[float] = field(default_factory=list)  # per-pair medians (or --stat), seconds
    overlay: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    verdict: str = ""
    low: float | None = None  # the 95% bootstrap interval of the median ratio
    high: float | None = None
    pairs_needed: int | None = None  # for INCONCLUSIVE: pairs that would decide, at this spread


def interval(ratios: list[float], rounds: int = 4000, seed: int = 0) -> tuple[float, float]:
    """A 95% percentile-bootstrap interval of the median of ``ratios`` (resampled with replacement; seeded,
    so that a report rebuilt from the same files says the same)."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(rounds))
    return medians[int(0.025 * rounds)], medians[min(rounds - 1, int(0.975 * rounds))]


def decide(row: Row, limit: float) -> None:
    """PASS, FAIL or INCONCLUSIVE from the interval of the median ratio against ``limit``."""
    row.low, row.high = interval(row.ratios)
    if row.high <= limit:
        row.verdict = "PASS"
    elif row.low > limit:
        row.verdict = "FAIL"
    else:
        row.verdict = "INCONCLUSIVE"
        half, distance = (row.high - row.low) / 2, abs(statistics.median(row.ratios) - limit)
        # the interval narrows as 1/sqrt(pairs): pairs at which its half-width is the median's distance
        row.pairs_needed = math.ceil(len(row.ratios) * (half / distance) ** 2) if distance > 0 else None


def load_stat(path: Path, stat: str = "median") -> dict[str, tuple[str, float]]:
    """fullname -> (group, seconds) of one pytest-benchmark JSON file; {} if unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {b["fullname"]: (b["group"], b["stats"][stat]) for b in data.get("benchmarks", [])}


def build_rows(pairs: list[tuple[Path, Path]], thresholds: dict[str, float], stat: str = "median") -> list[Row]:
    rows: dict[str, Row] = {}
    for stock_path, overlay_path in pairs:
        stock, overlay = load_stat(stock_path, stat), load_stat(overlay_path, stat)
        for name in sorted(stock.keys() | overlay.keys()):
            group = (stock.get(name) or overlay.get(name))[0]
            workload, measure, target = (group.split("/") + ["?", "?"])[:3]
            row = rows.setdefault(name, Row(workload, measure, target))
            if name in stock:
                row.stock.append(stock[name][1])
            if name in overlay:
                row.overlay.append(overlay[name][1])
            if name in stock and name in overlay:
                row.ratios.append(overlay[name][1] / stock[name][1])
    for row in rows.values():
        limit = thresholds.get(row.measure, thresholds["exec"])
        if not row.ratios:
            row.verdict = "overlay only (stock skipped)" if row.overlay else "stock only"
        else:
            decide(row, limit)
    return sorted(rows.values(), key=lambda r: (r.workload, r.measure, r.target))


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def render(rows: list[Row]) -> str:
    head = (f"  {'measure':8} {'target':13} {'stock':>9} {'overlay':>9} {'median':>6} {'95% interval':>15} {'n':>3}"
            "  verdict; per-pair ratios")
    out = []
    for workload in sorted({r.workload for r in rows}):
        out += [f"== {workload}", head]
        for r in (r for r in rows if r.workload == workload):
            if r.ratios:
                ratio = f"{statistics.median(r.ratios):6.3f} {f'[{r.low:.3f}, {r.high:.3f}]':>15}"
                verdict = r.verdict + (f" (about {r.pairs_needed} pairs would decide)" if r.pairs_needed else "")
                verdict += "; " + " ".join(f"{x:.3f}" for x in r.ratios)
            else:
                ratio, verdict = f"{'-':>6} {'-':>15}", r.verdict
            out.append(
                f"  {r.measure:8} {r.target:13} {fmt_time(_median(r.stock)):>9} {fmt_time(_median(r.overlay)):>9}"
                f" {ratio} {len(r.ratios):>3}  {verdict}"
            )
    return "\n".join(out)


def scaling(rows: list[Row]) -> dict[str, dict[str, dict[int, float]]]:
    """target -> side -> N -> median compile seconds, for the chain-N workloads."""
    table: dict[str, dict[str, dict[int, float]]] = {}
    for r in rows:
        m = re.fullmatch(r"chain-(\d+)", r.workload)
        if not m or r.measure != "compile":
            continue
        for side, values in (("stock", r.stock), ("overlay", r.overlay)):
            if values:
                table.setdefault(r.target, {}).setdefault(side, {})[int(m.group(1))] = statistics.median(values)
    return table


def render_scaling(table) -> str:
    out = []
    for target, sides in sorted(table.items()):
        out.append(f"== compile time per op, chain-N, {target}")
        for side, points in sides.items():
            cells = ", ".join(f"N={n}: {fmt_time(t)} total, {fmt_time(t / n)}/op" for n, t in sorted(points.items()))
            out.append(f"  {side:8} {cells}")
    return "\n".join(out)


def plot_scaling(table, path: Path) -> bool:
    if not any(len(points) >= 2 for sides in table.values() for points in sides.values()):
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5))
    for target, sides in sorted(table.items()):
        for side, points in sides.items():
            ns = sorted(points)
            ax.plot(ns, [points[n] for n in ns], marker="o", label=f"{side} ({target})")
    ax.set(xscale="log", yscale="log", xlabel="N elementwise ops", ylabel="compile time (s)")
    ax.set_title("thunder.jit compile time vs program size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
