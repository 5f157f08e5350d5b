"""The one comparator of "the same program up to a consistent renaming of proxies" (invariant I7).

Two traces are the same program when their texts are equal except for the names of their proxies, and
those names pair up as a bijection: one stock name <-> one overlay name, across the whole text, comments
included. ``match`` compares two trace texts (thunder-overlay names, bench/fusion_identity.py, the
distributed check and the tests use it); ``match_lines`` is its core, for callers that already know which
pieces of a line are proxy names (``names`` compares its symbol-by-symbol records with it).

What else the comparator treats specially:
- ``normalise`` drops the wall-clock figure in thunder's "(took N milliseconds)" headers and the id thunder
  appends to the symbol of a ``torch.autograd.Function`` subclass (``_`` and six or more digits): both
  differ between processes that trace one program.
- A comment holding a line of the program's source (``# file.py:12: <tab>u = a @ b``) is compared as
  plain text: its identifiers are source code, not proxies, and must be equal on both sides.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOOK = re.compile(r" \(took \d+ milliseconds\)")
_CLASS_ID = re.compile(r"_[0-9]{6,}")
_SOURCE_LINE = re.compile(r"\s*# .+:\d+: \t")

# A line, as the comparator sees it: pieces of text, each a proxy name (True) or anything else (False)
Piece = tuple[bool, str]


def normalise(text: str) -> str:
    """``text`` without what differs between processes that trace one program (the module docstring says what)."""
    return _CLASS_ID.sub("", _TOOK.sub("", text))


@dataclass
class Difference:
    line: int  # 1-based, in the normalised texts
    stock: str
    overlay: str
    why: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.why}\n  stock:   {self.stock}\n  overlay: {self.overlay}"


@dataclass
class Match:
    difference: Difference | None  # None: the same program
    renaming: dict[str, str]  # stock name -> overlay name, for the names that differ (up to the difference)
    pairs: dict[str, str] = field(default_factory=dict)  # stock name -> overlay name, every name seen, in order


def split(line: str, names: frozenset[str]) -> list[Piece]:
    """A line of trace text as pieces: an identifier in ``names`` is a proxy name, except in a source comment."""
    if _SOURCE_LINE.match(line):
        return [(False, line)]
    pieces, pos = [], 0
    for m in _IDENTIFIER.finditer(line):
        if m.group() in names:
            pieces.append((False, line[pos : m.start()]))
            pieces.append((True, m.group()))
            pos = m.end()
    pieces.append((False, line[pos:]))
    return pieces


def compare(stock_text: str, stock_names, overlay_text: str, overlay_names) -> Difference | None:
    """``None`` when the texts are equal up to a bijection of proxy names, else the first difference."""
    return match(stock_text, stock_names, overlay_text, overlay_names).difference


def match(stock_text: str, stock_names, overlay_text: str, overlay_names) -> Match:
    """The texts compared: their first difference, if any, and the renaming found."""
    stock_names, overlay_names = frozenset(stock_names), frozenset(overlay_names)
    return match_lines(
        [split(line, stock_names) for line in normalise(stock_text).splitlines()],
        [split(line, overlay_names) for line in normalise(overlay_text).splitlines()],
    )


def match_lines(stock_lines: list[list[Piece]], overlay_lines: list[list[Piece]]) -> Match:
    """The comparator itself, on lines already split into pieces: every piece that is not a proxy name must be
    equal, and the proxy names must pair up as one bijection over all lines."""
    forward: dict[str, str] = {}
    backward: dict[str, str] = {}

    def done(difference):
        return Match(difference, {a: b for a, b in forward.items() if a != b}, dict(forward))

    def text(pieces):
        return "".join(t for _, t in pieces)

    for i, (pa, pb) in enumerate(zip(stock_lines, overlay_lines), start=1):
        a, b = text(pa), text(pb)
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
                text(stock_lines[i]) if i < len(stock_lines) else "<end>",
                text(overlay_lines[i]) if i < len(overlay_lines) else "<end>",
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


def proxy_names(trace) -> list[str]:
    """Every proxy name of a thunder trace (its inputs, every symbol's and subsymbol's arguments and outputs,
    and the proxies in a tensor's shape): the names ``match`` may pair with other names."""
    from thunder.core.proxies import Proxy
    from thunder.core.pytree import tree_flatten

    names: dict[str, None] = {}

    def visit(bsyms):
        for bsym in bsyms:
            flat, _ = tree_flatten((bsym.args, bsym.kwargs, bsym.output))
            for x in flat:
                if isinstance(x, Proxy):
                    names[x.name] = None
                    for s in getattr(x, "_shape", ()) or ():
                        if isinstance(s, Proxy):
                            names[s.name] = None
            visit(bsym.subsymbols)

    flat_args, _ = tree_flatten((trace.args, trace.kwargs))
    for x in flat_args:
        if isinstance(x, Proxy):
            names[x.name] = None
    visit(trace.bound_symbols)
    return sorted(names)


def describe(trace) -> dict:
    """A trace as ``match`` takes it, JSON-ready: {"text": its text, "proxies": its proxy names}."""
    return {"text": str(trace), "proxies": proxy_names(trace)}
