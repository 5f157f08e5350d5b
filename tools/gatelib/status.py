"""What the committed results say, running nothing: a run's summary rebuilt from its outcome stores (--report)
and, per result folder, which thunder it is of, whether its overlay outcomes are of the series patches/ holds now
and which modules each side still lacks (--status)."""

import importlib.metadata
import json
import subprocess
import textwrap
from pathlib import Path

from gatelib import outcomes, plan, report, store
from gatelib.runner import SIDES, infra_problem


def latest_summary(folder):
    """The newest gate-*.json of a folder (by its recorded date), or None."""
    found = []
    for f in Path(folder).glob("gate-*.json"):
        try:
            found.append((json.loads(f.read_text()), f))
        except (OSError, ValueError):
            continue
    return max(found, key=lambda pair: str(pair[0].get("date") or ""), default=(None, None))[0]


def stores_of(folder):
    return {side: store.read(store.path(folder, side)) for side in SIDES}


def has_store(folder):
    return any(store.path(folder, side).exists() for side in SIDES)


def _blocks_by_module(side_store):
    found = {}
    for b in sorted(side_store["blocks"].values(), key=lambda b: b["index"]):
        found.setdefault(b["module"], []).append(b)
    return found


def complete(blocks):
    """Whether a module's blocks on one side are every shard, each with a run that ended normally."""
    return bool(blocks) and len(blocks) == blocks[0]["count"] and all(store.usable(b) for b in blocks)


def rebuild(folder, allow):
    """The overall summary of the run in `folder` from its two stores and their times files. The committed summary,
    where there is one, adds only what they do not keep: the verdicts of the confirming reruns (for the same
    series). Modules not stored complete on both sides are listed under 'incomplete'."""
    folder = Path(folder)
    stores, summary = stores_of(folder), latest_summary(folder) or {}
    by_side = {side: _blocks_by_module(stores[side]) for side in SIDES}
    order = list(summary.get("modules") or [])
    names = order + sorted((set(by_side["stock"]) | set(by_side["overlay"])) - set(order))
    overlay_series = {b["key"].get("series") for b in stores["overlay"]["blocks"].values()}
    same_series = (summary.get("series") or {}).get("digest") in overlay_series
    confirmed = {e["id"]: e for key in ("regressions", "flaky") for e in summary.get(key, []) if e.get("rerun")} \
        if same_series else {}
    flaky = {e["id"] for e in summary.get("flaky", [])} if same_series else set()
    modules, incomplete = {}, {}
    for module in names:
        blocks = {side: by_side[side].get(module, []) for side in SIDES}
        lacking = [side for side in SIDES if not complete(blocks[side])]
        if lacking:
            incomplete[module] = lacking
            continue
        runs = {side: [store.run_of(b, store.path(folder, side)) for b in blocks[side]] for side in SIDES}
        for side in SIDES:
            for b, r in zip(blocks[side], runs[side]):
                r["seconds"], r["cpu_seconds"] = store.time_of(folder, side, b)
        merged = {side: report.merge_runs(runs[side]) for side in SIDES}
        found = outcomes.compare(module, merged["stock"], merged["overlay"], allow)
        for e in found["regressions"]:
            if e["id"] in confirmed:
                e["rerun"] = confirmed[e["id"]]["rerun"]
        found["flaky"] = [e for e in found["regressions"] if e["id"] in flaky]
        found["regressions"] = [e for e in found["regressions"] if e["id"] not in flaky]
        found["infra_errors"] = [f"{b['unit']} [{side}]: {problem}" for side in SIDES for b, r in zip(blocks[side], runs[side])
                                 if (problem := infra_problem(r))]
        key = blocks["stock"][0]["key"]
        meta = {"thunder": key.get("thunder"), "torch": key.get("torch"),
                "selection": {"k": key.get("k"), "shards": len(blocks["stock"]), "timeout": key.get("timeout")}}
        modules[module] = report.module_summary(module, runs, found, meta)
    first = next((b["key"] for s in stores.values() for b in s["blocks"].values()), {})
    head = {"thunder": first.get("thunder") or summary.get("thunder"), "torch": first.get("torch"),
            "python": first.get("python"), "date": summary.get("date"), "quick": summary.get("quick", False),
            "complete": not incomplete, "rebuilt_from": [store.path(folder, side).name for side in SIDES],
            "series": summary.get("series")}
    return dict(report.overall(modules, head), incomplete=incomplete)


# ----------------------------------------------------------------------------------------------------
# --status


def installed_thunder():
    """(version, tests folder) of the lightning-thunder this interpreter has installed, without importing it."""
    try:
        dist = importlib.metadata.distribution("lightning-thunder")
    except importlib.metadata.PackageNotFoundError:
        return None, None
    return dist.version, Path(dist.locate_file("thunder/tests"))


def current_series(patches_dir, base):
    """The fingerprint of series `base` as patches/ holds it now (plan.series_fingerprint), or None."""
    folder = Path(patches_dir) / base
    if not (folder / "series").is_file():
        return None
    return plan.series_fingerprint(folder, base=base)


def series_changes(recorded, now):
    """What differs between two series fingerprints, as short phrases ([]: the same series)."""
    if now is None:
        return [f"patches/{recorded.get('base')} does not exist"]
    changes = []
    for file in sorted(recorded["files"].keys() | now["files"].keys()):
        was, is_ = recorded["files"].get(file, {}), now["files"].get(file, {})
        for patch in sorted(was.keys() | is_.keys()):
            if patch not in is_:
                changes.append(f"{patch} no longer changes {file}")
            elif patch not in was:
                changes.append(f"{patch} now changes {file}")
            elif was[patch] != is_[patch]:
                changes.append(f"{patch} changed")
    return list(dict.fromkeys(changes))


def _base_for(version, patches_dir):
    from thunder_overlay import manifest

    try:
        base = manifest.base_for(manifest.load(Path(patches_dir)), version)
    except (OSError, ValueError):
        return None
    return base.name if base else None


def _git_state(file):
    """'committed 2026-12-06', 'committed 2026-12-06, changed since', 'not committed' or 'absent'."""
    if not file.exists():
        return "absent"

    def git(*cmd):
        return subprocess.run(["git", *cmd], cwd=file.parent, capture_output=True, text=True, check=False).stdout.strip()

    date = git("log", "-1", "--format=%cs", "--", file.name)
    if not date:
        return "not committed"
    return f"committed {date}" + (", changed since" if git("status", "--porcelain", "--", file.name) else "")


def expected_modules(summary, stores, version, installed):
    """The modules a folder's run covers: the summary's; where it ran every module (no --modules, -k, --quick,
    --test-root), also every module the installed thunder ships when it is that thunder; and every stored one."""
    names = list((summary or {}).get("modules") or [])
    argv = (summary or {}).get("argv") or []
    narrowed = (summary or {}).get("quick") or any(a in argv for a in ("--modules", "-k", "--quick", "--test-root"))
    if not narrowed and installed[0] == version and installed[1] and installed[1].is_dir():
        names += plan.discover(installed[1])
    names += [b["module"] for s in stores.values() for b in s["blocks"].values()]
    return list(dict.fromkeys(names))


def _names(modules, limit=100):
    return "\n".join(textwrap.wrap(", ".join(modules), limit, initial_indent=" " * 13, subsequent_indent=" " * 13))


def folder_status(folder, patches_dir, installed):
    """The lines --status prints for one result folder."""
    folder = Path(folder)
    summary, stores = latest_summary(folder), stores_of(folder)
    keys = [b["key"] for s in stores.values() for b in s["blocks"].values()]
    version = (summary or {}).get("thunder") or next((k.get("thunder") for k in keys), None)
    lines = [f"{folder.name}: thunder {version or '?'}"]
    if summary:
        lines[0] += (f", summary of {summary.get('date')} ({'complete' if summary.get('complete') else 'incomplete'}, "
                     f"{len(summary.get('modules') or {})} modules)")
    for side in SIDES:
        versions = sorted({f"torch {b['key'].get('torch')}, python {b['key'].get('python')}, plugin "
                           f"{b['key'].get('plugin')}" for b in stores[side]["blocks"].values()})
        lines.append(f"  {side + '.outcomes:':<18} {_git_state(store.path(folder, side))}"
                     + (f"; {'; '.join(versions)}" if versions else ""))
    lines += _series_lines(folder, summary, stores["overlay"], version, patches_dir)
    expected = expected_modules(summary, stores, version, installed)
    current = _current_digests(stores["overlay"], version, patches_dir)
    for side in SIDES:
        by_module = _blocks_by_module(stores[side])
        done = [m for m in expected if complete(by_module.get(m, []))]
        stale = [m for m in done if side == "overlay" and current is not None
                 and any(b["key"].get("series") not in current for b in by_module[m])]
        missing = [m for m in expected if m not in done]
        if not done:
            lines.append(f"  {side + ':':<9} none of {len(expected)} modules stored")
            continue
        line = f"  {side + ':':<9} {len(done) - len(stale)} of {len(expected)} modules stored"
        line += f" ({len(stale)} more for another series: rerun)" if stale else ""
        lines.append(line + (f"; missing {len(missing)}:" if missing else "; none missing"))
        if missing:
            lines.append(_names(missing))
        if stale:
            lines += ["           for another series:", _names(stale)]
    return lines


def _recorded_series(summary, overlay_store):
    """{digest: fingerprint} the folder's overlay results are of: the overlay store's, else the summary's."""
    if overlay_store["series"]:
        return dict(overlay_store["series"])
    fp = (summary or {}).get("series")
    return {fp["digest"]: {"base": fp["base"], "files": fp["files"]}} if fp and fp.get("files") is not None else {}


def _current_digests(overlay_store, version, patches_dir):
    """The digests among the overlay store's series that patches/ holds now (None: nothing to compare)."""
    if not overlay_store["series"]:
        return None
    return {d for d, fp in overlay_store["series"].items()
            if fp.get("base") and not series_changes(fp, current_series(patches_dir, fp["base"]))}


def _series_lines(folder, summary, overlay_store, version, patches_dir):
    recorded = _recorded_series(summary, overlay_store)
    if not recorded:
        # the base of that release, else the one the folder is named after (gate-main-patched-tests: main)
        bases = [_base_for(version, patches_dir) if version else None, folder.name.removeprefix("gate-").split("-")[0]]
        now = next((fp for base in bases if base and (fp := current_series(patches_dir, base))), None)
        base = now and now["base"]
        where = f"patches/{base} is series {store.digest(now)}" if now else "no base in patches/manifest.toml"
        return [f"  series:  not recorded (no overlay outcomes, or a summary from before series fingerprints); {where}"]
    lines = []
    for name, fp in sorted(recorded.items()):
        units = sum(1 for b in overlay_store["blocks"].values() if b["key"].get("series") == name)
        where = f"{units} overlay units" if overlay_store["series"] else "the summary"
        changes = series_changes(fp, current_series(patches_dir, fp["base"]))
        verdict = (f"the series patches/{fp['base']} holds now" if not changes
                   else f"NOT the series patches/{fp['base']} holds now: " + "; ".join(changes))
        date = (summary or {}).get("series", {}).get("date") if (summary or {}).get("series", {}).get("digest") == name \
            else None
        lines.append(f"  series:  {name} ({where}{', recorded ' + date if date else ''}): {verdict}")
    return lines


def status_text(results_dir, patches_dir, installed=None):
    """--status: every gate-* folder under results_dir, oldest thunder first."""
    installed = installed if installed is not None else installed_thunder()
    folders = [f for f in sorted(Path(results_dir).glob("gate-*")) if f.is_dir()]
    lines = [f"installed: lightning-thunder {installed[0] or 'none'}; series from {patches_dir}", ""]
    for folder in folders:
        lines += folder_status(folder, patches_dir, installed) + [""]
    return "\n".join(lines).rstrip() + "\n"
