"""THUNDER_OVERLAY's accepted values, the warning for any other, and what status says when thunder itself
cannot be imported."""

import re

import pytest

from conftest import REPO, last_json, run_python
from thunder_overlay.config import MODES

DRY_STATUS = "import json, thunder_overlay; print(json.dumps(thunder_overlay.status(import_thunder=False)))"
# Process the start-up hook's .pth a second time, as a site directory listed twice would.
HOOK_TWICE = """
import site, sys
for p in list(sys.path):
    if p.endswith("site-packages"):
        site.addsitedir(p)
"""


@pytest.mark.parametrize("value", sorted(MODES))
def test_every_accepted_value_selects_its_mode_silently(value):
    proc = run_python(DRY_STATUS, overlay=value.upper())
    state = last_json(proc)["state"]
    assert state == ("disabled" if MODES[value] == "off" else "ready")
    assert "thunder-overlay:" not in proc.stderr


def test_unknown_value_warns_once_naming_the_accepted_values_and_stays_on():
    proc = run_python(HOOK_TWICE, DRY_STATUS, overlay="banana")
    assert last_json(proc)["state"] == "ready"
    warnings = [line for line in proc.stderr.splitlines() if "unknown THUNDER_OVERLAY='banana'" in line]
    assert len(warnings) == 1, proc.stderr
    accepted = warnings[0].split("accepted values: ")[1]
    assert all(repr(v) in accepted for v in MODES if v) and "OverlayWarning" in warnings[0]


def test_unknown_value_under_warnings_as_errors_is_printed_not_raised():
    proc = run_python("print('alive')", overlay="banana", args=("-W", "error"))
    assert proc.returncode == 0 and proc.stdout == "alive\n"
    assert proc.stderr.count("unknown THUNDER_OVERLAY='banana'") == 1
    assert "[printed, not raised: warnings are errors in this process]" in proc.stderr


def test_readme_table_lists_every_accepted_value():
    readme = (REPO / "README.md").read_text()
    table = readme[readme.index("| `THUNDER_OVERLAY` |"):].split("\n\n")[0]
    documented = {v.lower() for cell in re.findall(r"^\| ([^|]+)\|", table, re.M) for v in re.findall(r"`([^`]*)`", cell)}
    assert {v for v in MODES if v} <= documented, sorted({v for v in MODES if v} - documented)


def test_status_says_plainly_when_torch_lacks_what_thunder_0_2_needs():
    # torch 2.13 removed named tensors; thunder 0.2.x refers to torch.Tensor.align_as at import and fails
    # with "AttributeError: type object 'Tensor' has no attribute 'align_as'". The same condition with the
    # installed torch: the lookup fails as it does there (the method lives in torch's C base class, which
    # cannot lose an attribute, so torch.Tensor gets a descriptor that raises what torch 2.13 raises).
    proc = run_python(
        """
        import torch
        class Removed:
            def __get__(self, instance, owner=None):
                raise AttributeError("type object 'Tensor' has no attribute 'align_as'")
        torch.Tensor.align_as = Removed()
        """,
        "import json, thunder_overlay; print(json.dumps(thunder_overlay.status()))",
    )
    status = last_json(proc)
    assert status["state"] == "import-failed"
    assert status["import_error"] == status["reason"]
    assert "align_as" in status["import_error"]
    assert "thunder 0.2.x cannot be imported with torch " in status["import_error"]
    assert "torch 2.13 removed together with named tensors. Install torch<=2.12" in status["import_error"]
    assert status["files"] and status["known"], "what the overlay would do is still reported"


@pytest.mark.parametrize("line, env", [
    ("import thunder", {"THUNDER_OVERLAY_CACHE": "maybe"}),  # warned while thunder is imported
    ("import thunder", {"THUNDER_OVERLAY_PATCHES": "/nonexistent/patches"}),  # the refusal
    ("import thunder_overlay; thunder_overlay.enable(); thunder_overlay.enable()", {}),
])
def test_a_warning_points_at_the_users_line(tmp_path, line, env):
    # not at importlib/__init__.py, the overlay's own files or thunder's: at the line of the user's program
    program = tmp_path / "program.py"
    program.write_text(f"import warnings\nwarnings.simplefilter('always')\n{line}\n")
    proc = run_python(f"exec(compile(open({str(program)!r}).read(), {str(program)!r}, 'exec'))",
                      env={"THUNDER_OVERLAY_CACHE_DIR": str(tmp_path / "cache"), **env})
    warned = [w for w in proc.stderr.splitlines() if "OverlayWarning" in w]
    assert warned and all(w.startswith(f"{program}:3: OverlayWarning") for w in warned), proc.stderr
