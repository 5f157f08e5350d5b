"""Stock-vs-overlay report over pytest-benchmark JSON files written in pairs by compare.py.

Per benchmark, each pair gives the ratio overlay median / stock median (or another statistic); the table shows
every per-pair ratio, their median and a distribution-free 95% interval of that median: the order statistics
``[x_(k), x_(n+1-k)]`` of the n sorted ratios, with k the largest rank at which the interval still covers the true
median with probability >= 95% whatever the ratios' distribution (a binomial count: each ratio lies below the true
median with probability 1/2). Fewer than MIN_PAIRS (6) pairs admit no such interval (even the full range covers
the median with probability 1 - 2**(1 - n) only, 97% at 6 pairs, 50% at 2).

The verdict, per benchmark, against its threshold (compile or exec: groups are ``workload/measure/target``,
conftest.py):

- at least MIN_PAIRS pairs: PASS when the whole interval is at or below the threshold, FAIL when it is above,
  INCONCLUSIVE when it spans the threshold (with the pairs a run would need to decide at the spread seen);
- fewer pairs: INCONCLUSIVE, never PASS or FAIL, unless every per-pair ratio lies above ``fail_above`` (a gross
  slowdown, default 3.0, the bound CI sets): then FAIL.

The ``chain-N`` workloads also give a compile-time scaling table and a log-log plot; ``plot_ratios`` draws each
benchmark's median ratio with its interval against its threshold.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

LEVEL = 0.95  # the confidence of every interval the report states
FAIL_ABOVE = 3.0  # the default bound for fewer pairs than an interval needs (compare.py --fail-above; CI's 3.0)
PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"
VERDICTS = (PASS, FAIL, INCONCLUSIVE)


@dataclass
class Row:
    workload: str
    measure: str
    target: str
    stock: list[float] = field(default_factory=list)  # per-pair medians (or --stat), seconds
    overlay: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    verdict: str = ""
    threshold: float | None = None  # the threshold this benchmark was decided against
    low: float | None = None  # the 95% interval of the median ratio; with fewer than MIN_PAIRS pairs, the range
    high: float | None = None
    coverage: float | None = None  # the probability that [low, high] covers the true median
    pairs_needed: int | None = None  # for INCONCLUSIVE: pairs that would decide, at this spread
    why: str = ""  # for a verdict that is no plain comparison of the interval with the threshold


def _binomial_tail(n: int, k: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


def ranks(n: int, level: float = LEVEL) -> tuple[int, float] | None:
    """(k, coverage): the 1-based rank k of the widest-k order-statistic interval [x_(k), x_(n+1-k)] of n ratios
    whose coverage of the median is >= ``level``, and that coverage; None when even [min, max] falls short."""
    best = None
    for k in range(1, n // 2 + 1):
        coverage = 1 - 2 * _binomial_tail(n, k - 1)
        if coverage < level:
            break
        best = (k, coverage)
    return best


def min_pairs(level: float = LEVEL) -> int:
    """The fewest pairs that admit an interval of the median at ``level``: 6 at 95% (1 - 2**-5 < 0.95 <= 1 - 2**-6)."""
    n = 1
    while ranks(n, level) is None:
        n += 1
    return n


MIN_PAIRS = min_pairs()


def interval(ratios: list[float], level: float = LEVEL) -> tuple[float, float] | None:
    """The distribution-free ``level`` interval of the median of ``ratios`` (order statistics), or None when
    there are fewer ratios than it needs (MIN_PAIRS at 95%)."""
    found = ranks(len(ratios), level)
    if found is None:
        return None
    k, _ = found
    xs = sorted(ratios)
    return xs[k - 1], xs[len(xs) - k]


def _pairs_to_decide(ratios: list[float], low: float, high: float, limit: float) -> int | None:
    """About how many pairs would decide, at the spread seen: the interval narrows as 1/sqrt(pairs); the pairs
    at which its half-width is the median's distance from the limit (at least MIN_PAIRS, at least one more)."""
    n, distance = len(ratios), abs(statistics.median(ratios) - limit)
    if distance == 0:
        return None
    half = (high - low) / 2
    return max(MIN_PAIRS, n + 1, math.ceil(n * (half / distance) ** 2))


def decide(row: Row, limit: float, fail_above: float | None = FAIL_ABOVE) -> None:
    """The verdict of ``row`` (its ``ratios`` set) against ``limit``; below MIN_PAIRS pairs only ``fail_above``
    (None: no such bound) can give one."""
    row.threshold = limit
    n = len(row.ratios)
    found = interval(row.ratios)
    if found is None:
        row.low, row.high = min(row.ratios), max(row.ratios)
        row.coverage = 1 - 2 * 0.5**n if n > 1 else 0.0
        if fail_above is not None and row.low > fail_above:
            row.verdict = FAIL
            row.why = f"every ratio above {fail_above:g}"
        else:
            row.verdict = INCONCLUSIVE
            row.why = f"{n} pair{'s' if n != 1 else ''}; a 95% interval needs {MIN_PAIRS}"
            row.pairs_needed = _pairs_to_decide(row.ratios, row.low, row.high, limit) or MIN_PAIRS
        return
    row.low, row.high = found
    row.coverage = 1 - 2 * _binomial_tail(n, ranks(n)[0] - 1)
    if row.high <= limit:
        row.verdict = PASS
    elif row.low > limit:
        row.verdict = FAIL
    else:
        row.verdict = INCONCLUSIVE
        row.pairs_needed = _pairs_to_decide(row.ratios, row.low, row.high, limit)


def counts(rows: list[Row]) -> dict[str, int]:
    """{PASS: n, FAIL: n, INCONCLUSIVE: n} over the benchmarks compared (run on both sides)."""
    return {v: sum(1 for r in rows if r.ratios and r.verdict == v) for v in VERDICTS}


def load_stat(path: Path, stat: str = "median") -> dict[str, tuple[str, float]]:
    """fullname -> (group, seconds) of one pytest-benchmark JSON file; {} if unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {b["fullname"]: (b["group"], b["stats"][stat]) for b in data.get("benchmarks", [])}


def build_rows(pairs: list[tuple[Path, Path]], thresholds: dict[str, float], stat: str = "median",
               fail_above: float | None = FAIL_ABOVE) -> list[Row]:
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
            decide(row, limit, fail_above)
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
    head = (f"  {'measure':8} {'target':13} {'stock':>9} {'overlay':>9} {'median':>6} {'interval':>16} {'n':>3}"
            "  verdict; per-pair ratios")
    out = []
    for workload in sorted({r.workload for r in rows}):
        out += [f"== {workload}", head]
        for r in (r for r in rows if r.workload == workload):
            if r.ratios:
                # a range (fewer pairs than a 95% interval needs) is marked with ~
                mark = " " if len(r.ratios) >= MIN_PAIRS else "~"
                ratio = f"{statistics.median(r.ratios):6.3f} {f'{mark}[{r.low:.3f}, {r.high:.3f}]':>16}"
                notes = [r.why] if r.why else []
                if r.pairs_needed:
                    notes.append(f"about {r.pairs_needed} pairs would decide")
                verdict = r.verdict + (f" ({'; '.join(notes)})" if notes else "")
                verdict += "; " + " ".join(f"{x:.3f}" for x in r.ratios)
            else:
                ratio, verdict = f"{'-':>6} {'-':>16}", r.verdict
            out.append(
                f"  {r.measure:8} {r.target:13} {fmt_time(_median(r.stock)):>9} {fmt_time(_median(r.overlay)):>9}"
                f" {ratio} {len(r.ratios):>3}  {verdict}"
            )
    if any(r.ratios and len(r.ratios) < MIN_PAIRS for r in rows):
        out.append(f"~[a, b]: the range of the ratios; under {MIN_PAIRS} pairs no 95% interval of the median exists")
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


COLORS = {PASS: "tab:green", FAIL: "tab:red", INCONCLUSIVE: "tab:orange"}


def plot_ratios(rows: list[Row], path: Path, fail_above: float | None = FAIL_ABOVE, title: str = "") -> bool:
    """One PNG: per compared benchmark, the per-pair ratios (grey), their median (coloured by verdict), its 95%
    interval (a solid bar; a dashed bar is the range where fewer pairs than an interval needs ran) and the
    benchmark's threshold (a black tick); 1.0 and ``fail_above`` as vertical lines. False when nothing compared."""
    shown = [r for r in rows if r.ratios]
    if not shown:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    short = any(len(r.ratios) < MIN_PAIRS for r in shown)
    fig, ax = plt.subplots(figsize=(9, 1.9 + 0.34 * len(shown)))
    for y, r in enumerate(reversed(shown)):
        colour = COLORS.get(r.verdict, "tab:gray")
        full = len(r.ratios) >= MIN_PAIRS
        ax.plot([r.low, r.high], [y, y], color=colour, lw=3 if full else 1.5, ls="-" if full else "--",
                solid_capstyle="butt")
        ax.scatter(r.ratios, [y] * len(r.ratios), marker="x", s=14, color="0.55", zorder=3)
        ax.scatter([statistics.median(r.ratios)], [y], marker="o", s=30, color=colour, zorder=4)
        ax.plot([r.threshold, r.threshold], [y - 0.35, y + 0.35], color="black", lw=1.5)
    ax.axvline(1.0, color="0.6", lw=0.8, ls=":")
    seen = [x for r in shown for x in (*r.ratios, r.threshold)] + [1.0]
    if short and fail_above is not None:  # the bound decides only benchmarks with fewer pairs
        ax.axvline(fail_above, color="tab:red", lw=0.8, ls=":")
        seen.append(fail_above)
    ax.set_xscale("log")
    ax.set_xlim(min(seen) / 1.04, max(seen) * 1.04)
    low, high = ax.get_xlim()
    # ticks at round ratios, the rounder first, none closer to another than a tenth of the axis (log)
    nice = (1.0, 2, 0.5, 3, 0.33, 1.5, 0.67, 1.2, 0.8, 5, 0.25, 10, 1.1, 0.9, 1.3, 4, 1.05, 0.95, 1.02, 0.98)
    gap, ticks = math.log(high / low) / 10, []
    for x in nice:
        if low <= x <= high and all(abs(math.log(x / t)) >= gap for t in ticks):
            ticks.append(x)
    ax.xaxis.set_major_locator(FixedLocator(sorted(ticks)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_ylim(-0.6, len(shown) - 0.4)
    ax.set_yticks(range(len(shown)))
    ax.set_yticklabels([f"{r.workload}/{r.measure}/{r.target} (n={len(r.ratios)})" for r in reversed(shown)],
                       fontsize=8)
    n = counts(rows)
    ax.set_title((f"{title}: " if title else "") + f"{n[PASS]} PASS, {n[FAIL]} FAIL, {n[INCONCLUSIVE]} INCONCLUSIVE",
                 fontsize=10)
    ax.set_xlabel(f"overlay / stock (log scale). x: each pair; dot: median (green PASS, red FAIL, orange "
                  f"INCONCLUSIVE);\nbar: 95% interval of the median, dashed: the range (under {MIN_PAIRS} pairs, no "
                  f"interval); black tick: threshold" + (f"; red dotted: {fail_above:g}" if short else ""), fontsize=8)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
