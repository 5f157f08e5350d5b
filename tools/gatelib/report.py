"""Summaries (one JSON per module, one overall), the console and markdown tables, and the ETA."""

import json
from pathlib import Path

from gatelib.outcomes import OUTCOMES, collect_status, counts

LISTS = ["regressions", "flaky", "allowlisted", "improvements", "other_changes"]


def fmt_time(s):
    """Seconds as 1h02m or 3m04s; '?' for a time nobody recorded (None)."""
    if s is None:
        return "?"
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def merge_runs(runs):
    """The runs of one side of a module (one per shard) -> one side: results, collect errors, totals."""
    side = {"results": {}, "collect_errors": {}, "total": 0, "returncodes": [], "reused": True,
            "seconds": _sum(r["seconds"] for r in runs), "cpu_seconds": _sum(r.get("cpu_seconds") for r in runs)}
    for r in runs:
        side["results"].update(r["results"])
        side["collect_errors"].update(r["collect_errors"])
        side["total"] += r["total"] or 0
        side["returncodes"].append(r["returncode"])
        side["reused"] = side["reused"] and bool(r["reused"])
    return side


def _sum(seconds):
    """The sum of times, None (not recorded) when one of them is."""
    seconds = list(seconds)
    return None if None in seconds else round(sum(seconds), 1)


def _known_sum(seconds):
    """The sum of the recorded times (None: none was recorded)."""
    known = [s for s in seconds if s is not None]
    return round(sum(known)) if known else None


def side_summary(side):
    out = {**counts(side["results"]), "tests": side["total"], "seconds": side["seconds"],
           "cpu_seconds": side["cpu_seconds"],
           "returncode": side["returncodes"][0] if len(side["returncodes"]) == 1 else side["returncodes"],
           "collect": collect_status(side)}
    if side["collect_errors"]:
        out["collect_reason"] = next(iter(side["collect_errors"].values()))["reason"]
    if side["reused"]:
        out["reused"] = True
    reasons = skip_reasons(side["results"])
    if reasons:
        out["skip_reasons"] = reasons
    return out


def skip_reasons(results):
    """{reason: tests} of the skipped tests, most frequent first (pytest's 'Skipped: ' prefix removed)."""
    found = {}
    for rec in results.values():
        if rec["outcome"] == "skipped":
            reason = (rec.get("msg") or "?").strip().splitlines()[-1].removeprefix("Skipped: ")
            found[reason] = found.get(reason, 0) + 1
    return dict(sorted(found.items(), key=lambda kv: -kv[1]))


def module_summary(module, unit_runs, found, meta):
    """unit_runs: {side: [run per shard]}; found: compare()/confirm() lists plus infra_errors; meta: the run's
    selection, dates and versions. The per-module JSON written beside the run (git keeps only the overall one)."""
    summary = {"module": module, **meta}
    for side, runs in unit_runs.items():
        summary[side] = side_summary(merge_runs(runs))
    count = len(unit_runs["stock"])
    if count > 1:
        summary["shards"] = [{"shard": f"{i + 1}/{count}",
                              "tests": {s: unit_runs[s][i]["total"] for s in unit_runs},
                              "seconds": {s: unit_runs[s][i]["seconds"] for s in unit_runs}}
                             for i in range(count)]
    for key in LISTS + ["infra_errors"]:
        summary[key] = found.get(key, [])
    summary["identical"] = found.get("identical", 0)
    return summary


def overall(modules, head):
    """Module summaries -> the overall summary (per module counts and every listed entry, module by module)."""
    out = {**head, "modules": {}, "not_collectable": {}, **{k: [] for k in LISTS + ["infra_errors"]}}
    for name, m in modules.items():
        out["modules"][name] = {"stock": m["stock"], "overlay": m["overlay"], "identical": m.get("identical"),
                                **{k: len(m[k]) for k in ("regressions", "improvements", "flaky")}}
        if m["stock"]["collect"] == "not collectable" or m["overlay"]["collect"] == "not collectable":
            out["not_collectable"][name] = {s: m[s].get("collect_reason") for s in ("stock", "overlay")}
        for key in LISTS + ["infra_errors"]:
            out[key] += m[key]
    out["totals"] = totals(out)
    return out


def totals(summary):
    """The run in numbers: modules (with tests on CPU, collecting no test, every test skipped, not collectable),
    tests and seconds per side, and test ids with one outcome on both sides (None where an older summary lacks
    the per-module count)."""
    mods = summary["modules"].values()
    sides = ("stock", "overlay")
    ran = [m for m in mods if any(m[s].get("tests") for s in sides)]
    identical = [m.get("identical") for m in mods]
    return {
        "modules": len(summary["modules"]),
        "modules_with_tests": len(ran),
        "modules_without_tests": sum(1 for m in mods if not any(m[s].get("tests") for s in sides)
                                     and all(m[s]["collect"] == "ok" for s in sides)),
        "modules_all_skipped": sum(1 for m in ran if all(m[s]["skipped"] == m[s]["tests"] for s in sides)),
        "not_collectable": len(summary["not_collectable"]),
        "tests": {s: sum(m[s].get("tests") or 0 for m in mods) for s in sides},
        "outcomes": {s: {o: sum(m[s].get(o) or 0 for m in mods) for o in OUTCOMES} for s in sides},
        **{key: {s: _known_sum(m[s].get(key) for m in mods) for s in sides} for key in ("seconds", "cpu_seconds")},
        "untimed": {s: sum(1 for m in mods if m[s].get("seconds") is None) for s in sides},
        "cpu_untimed": {s: sum(1 for m in mods if m[s].get("cpu_seconds") is None) for s in sides},
        "identical": None if None in identical else sum(identical),
    }


def totals_text(summary):
    t = summary["totals"]
    same = "?" if t["identical"] is None else t["identical"]
    return (f"{t['modules']} modules: {t['modules_with_tests']} with tests on CPU ({t['modules_all_skipped']} of them "
            f"skip every test), {t['modules_without_tests']} select no test, {t['not_collectable']} not collectable; "
            f"tests {t['tests']['stock']} stock / {t['tests']['overlay']} overlay, {same} ids with one outcome on both "
            f"sides; pytest wall time {_timed(t, 'seconds', 'untimed')}, "
            f"CPU time {_timed(t, 'cpu_seconds', 'cpu_untimed')}" + _outcome_totals(t))


def _outcome_totals(t):
    """'; stock / overlay: 3866 / 3867 passed, ...' (nothing for a summary from before 2026-12-07)."""
    if "outcomes" not in t:
        return ""
    st, ov = t["outcomes"]["stock"], t["outcomes"]["overlay"]
    return "; stock / overlay: " + ", ".join(f"{st[o]} / {ov[o]} {o}" for o in OUTCOMES if st[o] or ov[o])


def _timed(t, seconds, untimed):
    """'1h02m stock / 1h10m overlay', and the modules whose time was not recorded ('?': a summary from before
    2026-12-07, which holds no CPU time)."""
    text = " / ".join(f"{fmt_time(t.get(seconds, {}).get(s))} {s}" for s in ("stock", "overlay"))
    missing = {s: n for s, n in (t.get(untimed) or {}).items() if n}
    return text + (" (not recorded for " + " and ".join(f"{n} modules on the {s} side" for s, n in missing.items())
                   + ")" if missing else "")


def console_table(summary):
    cols = [o for o in OUTCOMES if o not in ("timeout", "crashed") or _any(summary, o)]
    width = max([18] + [len(m) for m in summary["modules"]])
    lines = [f"{'module':<{width}} {'side':<8} {'tests':>6} " + " ".join(f"{c:>7}" for c in cols)
             + "  regress improve   flaky    time"]
    for name, m in summary["modules"].items():
        for side in ("stock", "overlay"):
            s = m[side]
            extra = f"  {m['regressions']:>7} {m['improvements']:>7} {m['flaky']:>7}" if side == "overlay" else " " * 24
            if s["collect"] == "not collectable":
                row = f"not collectable: {s.get('collect_reason', '')}"[:8 * len(cols) + 6]
                lines.append(f"{name:<{width}} {side:<8} {row:<{8 * len(cols) + 7}}{extra} {fmt_time(s['seconds']):>7}")
                continue
            lines.append(f"{name:<{width}} {side:<8} {s['tests'] or 0:>6} " + " ".join(f"{s[c]:>7}" for c in cols)
                         + f"{extra} {fmt_time(s['seconds']):>7}")
    return "\n".join(lines)


def _any(summary, outcome):
    return any(m[s].get(outcome) for m in summary["modules"].values() for s in ("stock", "overlay"))


def markdown_table(summary):
    """One row per module, 'stock / overlay' in each cell, for docs/results.md."""
    cols = ["passed", "failed", "error"] + [o for o in ("timeout", "crashed") if _any(summary, o)] \
        + ["skipped", "xfailed", "xpassed"]
    head = ["module", "tests"] + cols + ["regressions", "flaky", "wall", "CPU"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m in summary["modules"].items():
        st, ov = m["stock"], m["overlay"]
        time = [f"{fmt_time(st.get(k))} / {fmt_time(ov.get(k))}" for k in ("seconds", "cpu_seconds")]
        if st.get("collect") == ov.get("collect") == "not collectable":
            reason = (st.get("collect_reason") or "").replace("|", "\\|")
            cells = [name, f"not collectable on both sides: {reason}"] + [""] * len(cols) + \
                [str(m["regressions"]), str(m["flaky"]), *time]
        else:
            def pair(key):
                return " / ".join("not collectable" if s.get("collect") == "not collectable" else str(s.get(key) or 0)
                                  for s in (st, ov))
            cells = [name, pair("tests")] + [pair(c) for c in cols] + [str(m["regressions"]), str(m["flaky"]), *time]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def entries_text(summary):
    lines = []
    if summary.get("not_collectable"):
        lines.append(f"\nNOT COLLECTABLE ({len(summary['not_collectable'])}):")
        for name, why in summary["not_collectable"].items():
            same = why["stock"] == why["overlay"]
            lines.append(f"  {name}: " + (f"both sides: {why['stock']}" if same else
                                          f"stock: {why['stock'] or 'collects'}; overlay: {why['overlay'] or 'collects'}"))
    for key in LISTS:
        if summary[key]:
            lines.append(f"\n{key.upper()} ({len(summary[key])}):")
        for e in summary[key]:
            lines.append(f"  {e['id']}: {e['stock']} -> {e['overlay']}" + (f"  # {e['why']}" if e.get("why") else "")
                         + (f" (rerun: {e['rerun']})" if e.get("rerun") else ""))
            if key in ("regressions", "flaky") and e.get("msg"):
                lines.append("      " + e["msg"].replace("\n", "\n      "))
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------
# ETA


def history(paths, quick):
    """What earlier runs say, from summaries in the given files or folders (this gate's module and overall JSONs,
    the older five-module format, --collect-only's collect-*.json): {"seconds": {(module, side): seconds of the
    whole module}, "tests": {module: tests selected}}. Only runs of the same kind (quick or not) count; a side
    reused without running (0 seconds) takes the other side's time; collection runs give test counts only."""
    seconds, tests = {}, {}
    files = []
    for p in map(Path, paths):
        files += [p] if p.is_file() else sorted(p.glob("gate-*.json")) + sorted(p.glob("collect-*.json")) \
            + sorted(p.glob("modules/*.json"))
    for f in files:
        try:
            data = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or bool(data.get("quick")) != quick:
            continue
        per_module = data.get("modules") if isinstance(data.get("modules"), dict) else \
            {data["module"]: data} if "module" in data else {}
        for module, m in per_module.items():
            sides = {s: m.get(s) or {} for s in ("stock", "overlay")}
            if sides["stock"].get("tests") is not None:
                tests.setdefault(module, sides["stock"]["tests"])
            if data.get("collect_only"):
                continue
            secs = {s: sides[s].get("seconds") or 0 for s in sides}
            for side, other in (("stock", "overlay"), ("overlay", "stock")):
                if secs[side] or secs[other]:
                    seconds.setdefault((module, side), secs[side] or secs[other])
    return {"seconds": seconds, "tests": tests}


def results_of(results_dir, version):
    """The run folders under results_dir whose summary is of this thunder version, whatever their name (a run
    of upstream main reports a dev version; its folder is named after main)."""
    found = []
    for folder in sorted(Path(results_dir).glob("gate-*")):
        for f in folder.glob("gate-*.json"):
            try:
                if json.loads(f.read_text()).get("thunder") == version:
                    found.append(folder)
                    break
            except (OSError, ValueError):
                continue
    return found


class Eta:
    """Remaining time of a run of planned tasks (unit, side). Each task's estimate, the first that is known:
    the running task from elapsed x (selected - done) / done once a tenth is done; a unit's other side from its
    time in this run; an earlier run's time of the module (a shard's share of it), scaled by how this run's
    finished tasks compare with their earlier times (the machine may be busier); the module's test count from
    earlier summaries times this run's seconds per test so far. Tasks with none of these are counted, not
    guessed."""

    def __init__(self, tasks, earlier, test_counts=None):
        self.tasks = list(tasks)
        self.earlier = {t: earlier[(t[0].module, t[1])] / t[0].count for t in self.tasks
                        if (t[0].module, t[1]) in earlier}
        self.test_counts = test_counts or {}
        self.spent, self.took, self.tests = {}, {}, {}  # this run's seconds (0: reused), the run's own, tests

    def finished(self, task, spent, took=None, tests=None):
        self.spent[task], self.took[task], self.tests[task] = spent, took if took is not None else spent, tests

    def scale(self):
        pairs = [(self.spent[t], self.earlier[t]) for t in self.spent if self.spent[t] and t in self.earlier]
        return sum(a for a, _ in pairs) / sum(e for _, e in pairs) if pairs else 1.0

    def seconds_per_test(self):
        ran = [t for t in self.spent if self.spent[t] and self.tests[t]]
        return sum(self.spent[t] for t in ran) / sum(self.tests[t] for t in ran) if ran else None

    def estimate(self, task):
        unit, side = task
        twin = (unit, "overlay" if side == "stock" else "stock")
        if self.took.get(twin):
            return self.took[twin]
        if task in self.earlier:
            return self.earlier[task] * self.scale()
        if unit.module in self.test_counts and self.seconds_per_test():
            return self.test_counts[unit.module] / unit.count * self.seconds_per_test()
        return None

    def remaining(self, current=None, elapsed=0, done=0, total=None):
        """(seconds, tasks without an estimate) still to go."""
        secs, unknown = 0.0, 0
        for t in self.tasks:
            if t in self.spent:
                continue
            est = self.estimate(t)
            # the running task's own rate once a tenth of it is done (before, start-up and collection dominate)
            if t == current and total and done and (done >= total / 10 or est is None):
                secs += elapsed * (total - done) / done
            elif est is not None:
                secs += max(est - elapsed, 0) if t == current else est
            else:
                unknown += 1
        return secs, unknown

    def line(self, label, current, elapsed, done, total, run_elapsed):
        """The progress line; current is the planned task running now (None for a rerun or between runs)."""
        secs, unknown = self.remaining(current, elapsed, done, total)
        text = (f"[progress] {label}: {done}/{total if total is not None else '?'} tests, {fmt_time(elapsed)}; "
                f"run {len(self.spent)}/{len(self.tasks)} done, elapsed {fmt_time(run_elapsed)}, ETA {fmt_time(secs)}")
        if unknown:
            text += f" + {unknown} run(s) not estimated yet"
        return text
