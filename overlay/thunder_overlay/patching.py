"""The cold path of the engine: which series the files of thunder call for, and the series applied to each.

The engine hands over every file a base of the manifest lists, found and hashed. The known base of these
bytes is chosen, or the series THUNDER_OVERLAY_BASE names for bytes of no base, or a refusal says which
file differs and how. Then every hunk of every file is applied and every file compiled before anything
runs, and the result is written to the bytecode cache.
"""

from __future__ import annotations

from pathlib import Path

from thunder_overlay import bytecode_cache, config, manifest
from thunder_overlay.config import BASE_ENV, OverlayRefusal
from thunder_overlay.patchset import PatchApplyError, PatchError, apply_series, read_series


def _mismatch(result, bases: list[manifest.Base], found: dict) -> str:
    """Why no base matches, naming one file: the first that differs from the base most files match (the
    release's base on a tie). ``result.targets`` become that base's files, so status shows which differ."""
    hashes = {p: t.sha256 for p, t in found.items()}
    result.targets = [found[p] for p in manifest.target_paths(bases)]  # for describe_install
    install = result.describe_install()
    release = result.thunder_version
    shipped = manifest.base_for(bases, release) if release else None
    nearest = max(bases, key=lambda b: (sum(hashes[p] == h for p, h in b.files.items()), b is shipped))
    result.targets = [found[p] for p in nearest.files]
    for target in result.targets:
        target.base_sha256 = nearest.files[target.path]
    target = next(t for t in result.targets if t.sha256 != t.base_sha256)
    if target.origin is None:
        return (f"{target.module} ({target.path}) is missing from {result.thunder_path}, and every base's series "
                f"that changes it expects it (supported releases: {', '.join(manifest.supported_releases(bases))})")
    where = f"{target.origin} ({f'thunder {release}, ' if release else ''}{result.install})"
    if shipped is nearest and target.path in install.edited:
        return (f"{where} has sha256 {target.sha256}, but the release ships {target.base_sha256}: the installed "
                f"file was edited locally. If the edit keeps the patched lines, {BASE_ENV}={shipped.name} applies "
                "that series when every hunk applies with exact context")
    other = next((b for b in bases if b.files.get(target.path) == target.sha256), None)
    if other is not None:
        return (f"{where} has sha256 {target.sha256}, the file of base {other.name}, while base {nearest.name} "
                f"has {target.base_sha256}: this thunder mixes files of two releases")
    releases = manifest.supported_releases(bases)
    # the newest final release: a pin to a nightly would hand the user a pre-release
    newest = max((r for r in releases if r[0].isdigit() and ".dev" not in r), key=manifest.release_key, default=None)
    return (f"thunder-overlay {config.__version__} has no series for {f'thunder {release}' if release else 'this thunder'}:"
            f" pin a supported release (pip install lightning-thunder=={newest}) or upgrade thunder-overlay. "
            f"{where} has sha256 {target.sha256}, which is no known base (supported releases: {', '.join(releases)}). "
            f"To try one anyway (a later upstream main, a local edit), {BASE_ENV}=<series> applies a series when "
            f"every hunk applies with exact context; series: {manifest.series_names(bases)}")


def _choose_series(result, bases: list[manifest.Base], found: dict) -> manifest.Base:
    """The known base of these bytes or, for bytes of no base, the series THUNDER_OVERLAY_BASE names."""
    known = manifest.base_for_files(bases, {p: t.sha256 for p, t in found.items()})
    if known is not None:
        result.known = True
        if result.base_switch and manifest.series_by_name(bases, result.base_switch) is not known:
            result.base_switch += f" (not used: thunder is the known base {known.name})"
        return known
    if result.base_switch:
        chosen = manifest.series_by_name(bases, result.base_switch)
        if chosen is None:
            raise OverlayRefusal(
                f"{BASE_ENV}={result.base_switch!r} names no patch series; valid names: "
                f"{manifest.series_names(bases)}"
            )
        return chosen
    raise OverlayRefusal(_mismatch(result, bases, found))


def _apply(result, series: manifest.Base, patches: list, target) -> None:
    if target.origin is None:
        raise OverlayRefusal(f"{target.module} ({target.path}) is missing from {result.thunder_path}, but the "
                             f"{series.name} series changes it")
    try:
        target.text = apply_series(target.source.decode("utf-8"), patches, target.path)
    except PatchApplyError as e:
        if result.known:
            raise
        raise OverlayRefusal(
            f"{BASE_ENV}={result.base_switch}: the {series.name} series does not apply with exact context to "
            f"{target.origin} (sha256 {target.sha256}): {e}"
        ) from None


def patch_files(result, bases: list[manifest.Base], found: dict, directory: Path, switch: str | None) -> None:
    """Choose the series for the files ``found`` ({path: engine.Target}: every file a base lists), apply it to
    each of its files and compile them all, then write the cache entry; raises OverlayRefusal (or a
    PatchError, ...) before anything is patched."""
    series = _choose_series(result, bases, found)
    result.base, result.base_releases, result.series_dir = series.name, list(series.releases), str(series.directory)
    # A known base is decided by its own files (bases always differ in a file both list); bytes of no base
    # by every file the manifest names, since a change to any of them could make them a known base.
    key_files = [t.key() for p, t in found.items() if not result.known or p in series.files]
    key = bytecode_cache.make_key(result.thunder_path, key_files, directory, series.directory, switch)
    patches = read_series(series.directory)
    changed = list(dict.fromkeys(p for patch in patches for p in patch.patched_paths()))
    if sorted(changed) != sorted(series.files):
        raise PatchError(f"{series.directory / 'series'} changes {', '.join(changed) or 'no file'}, but "
                         f"{config.MANIFEST} lists {', '.join(series.files)} for base {series.name}")
    result.targets = [found[p] for p in series.files]
    for target in result.targets:
        target.base_sha256 = series.files[target.path]
    for target in result.targets:
        _apply(result, series, patches, target)
    for target in result.targets:
        target.code = compile(target.text, config.patched_filename(target.origin), "exec", dont_inherit=True)
    result.patches = [Path(p.name).name for p in patches]
    result.state = "patched" if result.known else "patched-unverified"
    facts = {name: getattr(result, name) for name in bytecode_cache.FACTS}
    facts["base_sha256"] = [t.base_sha256 for t in result.targets]
    files = [[t.path, t.text, t.code] for t in result.targets]
    result.bytecode_cache = bytecode_cache.write(result.thunder_path, bytecode_cache.Entry(key, facts, files))
