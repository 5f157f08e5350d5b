"""The docs say what the tree has: every environment variable the code reads is in the README's table (and
nothing else is), every file of this project the docs name or link exists, and the README, which is also
the wheel's description, links nothing relative."""

import ast
import re
import subprocess

import pytest

from conftest import REPO

OVERLAY = REPO / "overlay" / "thunder_overlay"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "bench" / "README.md",
        REPO / "patches" / "UPSTREAM.md"]
TOP_LEVEL = ("docs/", "bench/", "tools/", "tests/", "patches/", "overlay/", ".ci/")


def _constant(module: ast.Module, name: str, imported: dict) -> str | None:
    for node in module.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value.value if isinstance(node.value, ast.Constant) else None
    return imported.get(name)


def _config_constants() -> dict:
    tree = ast.parse((OVERLAY / "config.py").read_text())
    return {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
            for t in n.targets if isinstance(t, ast.Name)}


def environment_reads() -> set[str]:
    """Every variable name the overlay's code reads from os.environ (get, [], getenv), constants resolved."""
    config = _config_constants()
    found = set()
    for path in OVERLAY.glob("*.py"):
        tree = ast.parse(path.read_text())
        imported = dict(config) if path.name == "config.py" else {
            a.asname or a.name: config.get(a.name) for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and n.module == "thunder_overlay.config" for a in n.names}
        for node in ast.walk(tree):
            key = None
            if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ":
                key = node.slice
            elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("os.environ.get", "os.getenv") and node.args:
                key = node.args[0]
            if key is None:
                continue
            if isinstance(key, ast.Constant):
                found.add(key.value)
            elif isinstance(key, ast.Name):
                found.add(_constant(tree, key.id, imported))
            elif isinstance(key, ast.Attribute) and ast.unparse(key.value) == "config":
                found.add(config.get(key.attr))
            else:
                pytest.fail(f"{path.name}: cannot resolve the variable read by {ast.unparse(node)}")
    hook = (REPO / "overlay" / "thunder_overlay.pth").read_text()
    found.update(re.findall(r'os\.environ\.get\("([A-Z_]+)"\)', hook))
    assert None not in found, "a variable name that is no constant"
    return found


def readme_variables() -> set[str]:
    text = (REPO / "README.md").read_text()
    table = text[text.index("## Environment variables"):]
    table = table[: table.index("\n## ")]
    return {m.split("=")[0] for m in re.findall(r"^\| `([A-Z_]+(?:=[^`]*)?)` \|", table, re.M)}


def test_every_variable_the_code_reads_is_in_the_readme_table_and_no_other():
    assert environment_reads() == readme_variables()


def _named_paths(text: str) -> set[str]:
    links = {m for m in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in m and not m.startswith("#")}
    quoted = {m for m in re.findall(r"`([^`\s]+)`", text) if m.startswith(TOP_LEVEL)}
    return {re.split(r"[#:]", p)[0].rstrip(".,") for p in links | quoted}


def _output_folder(path: str) -> bool:
    """A path the project's runs write (git ignores it: results, wheels brought along), not a file of the tree."""
    return any(subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", p]).returncode == 0
               for p in (path, path.rstrip("/") + "/"))


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_file_of_the_project_a_doc_names_exists(doc):
    missing = []
    for path in _named_paths(doc.read_text()):
        if any(c in path for c in "*<>{}$"):
            continue  # a pattern or a placeholder, not one file
        relative_to_doc = (doc.parent / path).resolve()
        if not (REPO / path).exists() and not relative_to_doc.exists() and not _output_folder(path):
            missing.append(path)
    assert missing == [], f"{doc.relative_to(REPO)} names files that are not in the tree: {sorted(missing)}"


def test_the_readme_links_nothing_relative():
    # it is also the package's description on an index, where relative links lead nowhere
    links = re.findall(r"\]\(([^)\s]+)\)", (REPO / "README.md").read_text())
    assert [link for link in links if "://" not in link] == []


def test_the_readmes_cost_figures_are_those_of_the_results_for_the_series_that_ships():
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## What it costs"):]
    section = section[: section.index("\n## ")]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| what ")]
    results = (REPO / "docs" / "results.md").read_text()
    assert rows, "the README states its cost figures in a table"
    assert [row for row in rows if row not in results] == [], "docs/results.md holds each row, figure for figure"
    shipped = re.search(r"`patches/` ships \*\*series (v\d+)\*\*", results).group(1)
    assert f"Series {shipped} " in section, f"the README's figures are of {shipped}, the series patches/ ships"
