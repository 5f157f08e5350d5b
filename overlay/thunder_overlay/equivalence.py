"""Two trace texts are the same program when they are equal up to a consistent renaming of proxies.

Every identifier of a text that names one of its trace's proxies may differ, provided the names pair
up as a bijection (one stock name <-> one overlay name, across the whole text, comments included);
every other character must be equal. The only other text that may differ is the wall-clock figure
in thunder's "(took N milliseconds)" headers.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOOK = re.compile(r" \(took \d+ milliseconds\)")


@dataclass
class Difference:
    line: int  # 1-based, in the normalised texts
    stock: str
    overlay: str
    why: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.why}\n  stock:   {self.stock}\n  overlay: {self.overlay}"


def _split(line: str, names: frozenset[str]) -> list[tuple[bool, str]]:
    """A line as alternating (is_proxy_name, text) pieces."""
    pieces, pos = [], 0
    for m in _IDENTIFIER.finditer(line):
        if m.group() in names:
            pieces.append((False, line[pos : m.start()]))
            pieces.append((True, m.group()))
            pos = m.end()
    pieces.append((False, line[pos:]))
    return pieces


@dataclass
class Match:
    difference: Difference | None  # None: the same program
    renaming: dict[str, str]  # stock name -> overlay name, for the names that differ (up to the difference)


def compare(stock_text: str, stock_names, overlay_text: str, overlay_names) -> Difference | None:
    """``None`` when the texts are equal up to a bijection of proxy names, else the first difference."""
    return match(stock_text, stock_names, overlay_text, overlay_names).difference


def match(stock_text: str, stock_names, overlay_text: str, overlay_names) -> Match:
    """The texts compared: their first difference, if any, and the renaming found."""
    stock_names, overlay_names = frozenset(stock_names), frozenset(overlay_names)
    stock_lines = _TOOK.sub("", stock_text).splitlines()
    overlay_lines = _TOOK.sub("", overlay_text).splitlines()
    forward: dict[str, str] = {}
    backward: dict[str, str] = {}

    def done(difference):
        return Match(difference, {a: b for a, b in forward.items() if a != b})

    for i, (a, b) in enumerate(zip(stock_lines, overlay_lines), start=1):
        pa, pb = _split(a, stock_names), _split(b, overlay_names)
        if len(pa) != len(pb) or any(ka != kb for (ka, _), (kb, _) in zip(pa, pb)):
            return done(Difference(i, a, b, "different text"))
        for (is_name, ta), (_, tb) in zip(pa, pb):
            if not is_name:
                if ta != tb:
                    return done(Difference(i, a, b, "different text"))
            elif forward.get(ta, tb) != tb or backward.get(tb, ta) != ta:
                earlier = forward[ta] if ta in forward else backward[tb]
                return done(
                    Difference(
                        i,
                        a,
                        b,
                        f"renaming is not consistent: stock {ta} <-> overlay {tb} here, but earlier "
                        + (
                            f"stock {ta} <-> overlay {earlier}"
                            if ta in forward
                            else f"stock {earlier} <-> overlay {tb}"
                        ),
                    )
                )
            else:
                forward[ta], backward[tb] = tb, ta
    if len(stock_lines) != len(overlay_lines):
        i = min(len(stock_lines), len(overlay_lines))
        return done(
            Difference(
                i + 1,
                "\n".join(stock_lines[i : i + 1]) or "<end>",
                "\n".join(overlay_lines[i : i + 1]) or "<end>",
                f"{len(stock_lines)} vs {len(overlay_lines)} lines",
            )
        )
    return done(None)


def short_diff(stock_text: str, overlay_text: str, context: int = 2, limit: int = 30) -> str:
    """A unified diff of the two texts, cut to ``limit`` lines."""
    lines = list(
        difflib.unified_diff(
            stock_text.splitlines(), overlay_text.splitlines(), "stock", "overlay", n=context, lineterm=""
        )
    )
    more = f"\n  ... {len(lines) - limit} more diff lines" if len(lines) > limit else ""
    return "\n".join(lines[:limit]) + more
