"""The engine's modules import one way: start-up -> engine -> manifest / cache -> patchset, with the
constants, switches and warnings in a leaf (config) that imports only os and sys. The README's commands are
CI's, and its links lead somewhere. The project's own Python passes ruff's default rules."""

import ast
import re
import subprocess
from pathlib import Path

from conftest import REPO
from test_upstream_style import ruff

PACKAGE = REPO / "overlay" / "thunder_overlay"
MODULES = {p.stem for p in PACKAGE.glob("*.py")} | {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}


def imports(path: Path) -> tuple[set[str], set[str]]:
    """(the package's modules ``path`` imports anywhere, the other top-level modules its module level imports)."""
    tree = ast.parse(path.read_text())
    ours, top_level_others = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "thunder_overlay":
            parts = node.module.split(".")
            ours |= {parts[1]} if len(parts) > 1 else {a.name if a.name in MODULES else "__init__" for a in node.names}
        elif isinstance(node, ast.Import):
            ours |= {a.name.split(".")[1] for a in node.names if a.name.startswith("thunder_overlay.")}
    for node in tree.body:
        if isinstance(node, ast.Import):
            top_level_others |= {a.name for a in node.names if not a.name.startswith("thunder_overlay")}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.module.startswith("thunder_overlay"):
            top_level_others.add(node.module)
    return ours - {path.stem}, top_level_others


GRAPH = {p.stem: imports(p)[0] for p in PACKAGE.glob("*.py")}


def test_no_module_of_the_package_imports_itself_back_through_others():
    def visit(module, path):
        for dep in sorted(GRAPH.get(module, ())):
            assert dep not in path, f"import circle: {' -> '.join([*path, dep])}"
            visit(dep, [*path, dep])

    for module in GRAPH:
        visit(module, [module])


def test_config_is_a_leaf_and_start_up_imports_only_it():
    config_ours, config_others = imports(PACKAGE / "config.py")
    assert config_ours == set() and config_others <= {"os", "sys"}
    startup_ours, startup_others = imports(PACKAGE / "_startup.py")
    assert startup_others <= {"os", "sys"} and startup_ours == {"config", "engine", "_deciding"}
    top_level = {a.names[0].name for a in ast.parse((PACKAGE / "_startup.py").read_text()).body
                 if isinstance(a, ast.ImportFrom)}
    assert top_level == {"config"}, "the engine and the deciding loader are imported only when thunder is"
    assert imports(PACKAGE / "_deciding.py") == (set(), set()), "imported under the import lock: it imports nothing"


def test_the_patches_directory_is_found_one_way():
    # config.patches_dir() alone knows where the series live (the package's folder, or the override)
    for path in [*PACKAGE.glob("*.py"), *(REPO / "tools").glob("*.py"), *(REPO / "bench").glob("*.py")]:
        if path.name != "config.py":
            text = path.read_text()
            assert "PATCHES_DIR" not in text and "get(PATCHES_ENV" not in text, path
            assert 'environ.get("THUNDER_OVERLAY_PATCHES"' not in text, path


def test_the_readmes_two_commands_are_the_ones_ci_runs():
    readme = (REPO / "README.md").read_text()
    opening = re.match(r"# thunder-overlay\n\n```bash\n(.*?)```\n", readme, re.S)
    assert opening, "the README opens with its commands"
    commands = [line.split(" # ")[0].strip() for line in opening.group(1).splitlines()]
    assert len(commands) == 2 and commands[0] == "./setup.sh" and " -m pytest tests " in commands[1]
    assert commands[1].endswith('-m "not slow"'), "the README's test command is the fast set"
    ci = [line.strip().removeprefix("phase ") for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert all(c in ci for c in commands) and ci.index(commands[0]) < ci.index(commands[1]), "CI runs them, in order"
    slow = commands[1].replace('-m "not slow"', "-m slow")
    assert slow in ci and ci.index(commands[1]) < ci.index(slow), "CI runs the slow tests after the fast set"


def test_the_readme_leads_to_the_maintainers_guide_and_the_results():
    # named as paths, not linked: the README is also the wheel's description (tests/test_docs.py checks
    # that every file a doc names exists)
    readme = (REPO / "README.md").read_text()
    assert "`docs/maintaining.md`" in readme and "`docs/results.md`" in readme


def test_the_project_s_own_python_passes_ruff_s_default_rules():
    # ruff's defaults: syntax errors, undefined or unused names, imports out of place; every Python file git holds
    files = subprocess.run(["git", "ls-files", "*.py"], capture_output=True, text=True, cwd=REPO, check=True).stdout.split()
    assert len(files) > 50
    check = ruff("check", "--isolated", "--output-format", "concise", *files, cwd=REPO)
    assert check.returncode == 0 and "All checks passed!" in check.stdout, check.stdout + check.stderr
