"""The one comparator of traces up to a consistent renaming of proxies (thunder_overlay.equivalence), on trace
texts as thunder prints them. Its use on real traces: test_program_unchanged.py, test_fusion_identity.py, and
`thunder-overlay names` (test_names.py)."""

from thunder_overlay import equivalence

STOCK = """\
# Constructed by Dead Code Elimination (took 12 milliseconds)
def computation(a, b):
  # a: "cpu f32[2, 2]"
  # b: "cpu f32[2, 2]"

  # /src/model.py:4: \t    u = a @ b
  t0 = ltorch.matmul(a, b)  # t0: "cpu f32[2, 2]"
    # t0 = prims.matmul(a, b)  # t0: "cpu f32[2, 2]"
  t1 = Function_140233115204208(t0)  # t1: "cpu f32[2, 2]"
  return (t1,)
"""
# the overlay's naming of the same program: t0 -> u, t1 -> t0; another pass duration and class id
OVERLAY = (
    STOCK.replace("t0", "u").replace("t1", "t0").replace("took 12", "took 3").replace("140233115204208", "139871234567")
)
STOCK_NAMES, OVERLAY_NAMES = ["a", "b", "t0", "t1"], ["a", "b", "u", "t0"]


def test_a_consistent_renaming_is_the_same_program():
    found = equivalence.match(STOCK, STOCK_NAMES, OVERLAY, OVERLAY_NAMES)
    assert found.difference is None, found.difference
    assert found.renaming == {"t0": "u", "t1": "t0"}
    assert found.pairs == {"a": "a", "b": "b", "t0": "u", "t1": "t0"}


def test_a_source_line_comment_is_program_text_not_names():
    # `u` names a proxy on the overlay's side only; in the source comment it is source code, equal on both sides
    assert "u = a @ b" in OVERLAY
    changed = OVERLAY.replace("u = a @ b", "u = b @ a")
    difference = equivalence.compare(STOCK, STOCK_NAMES, changed, OVERLAY_NAMES)
    assert difference is not None and difference.why == "different text" and difference.line == 6


def test_a_name_that_pairs_with_two_names_is_a_difference():
    # the overlay's return names u where stock's names t1: u already stands for stock's t0
    changed = OVERLAY.replace("return (t0,)", "return (u,)")
    difference = equivalence.compare(STOCK, STOCK_NAMES, changed, OVERLAY_NAMES)
    assert difference is not None and difference.why.startswith("renaming is not consistent: stock t1 <-> overlay u")


def test_any_other_change_is_a_difference():
    for old, new in [("ltorch.matmul", "ltorch.add"), ("f32[2, 2]", "bf16[2, 2]"), ("  return (t0,)\n", "")]:
        changed = OVERLAY.replace(old, new, 1)
        assert changed != OVERLAY
        difference = equivalence.compare(STOCK, STOCK_NAMES, changed, OVERLAY_NAMES)
        assert difference is not None, (old, new)
    assert equivalence.compare(STOCK, STOCK_NAMES, OVERLAY + "extra\n", OVERLAY_NAMES).why == "10 vs 11 lines"


def test_normalise_removes_only_pass_durations_and_class_ids():
    assert equivalence.normalise("x (took 12 milliseconds)\nf_140233115204208(t0_12345)") == "x\nf(t0_12345)"


def test_structured_lines_compare_like_text():
    # what `names` hands the comparator: pieces it has marked as names, whatever their spelling
    stock = [[(False, "inputs: "), (True, "x")], [(True, "t0"), (False, " = tanh("), (True, "x"), (False, ")")]]
    overlay = [[(False, "inputs: "), (True, "x")], [(True, "tanh"), (False, " = tanh("), (True, "x"), (False, ")")]]
    found = equivalence.match_lines(stock, overlay)
    assert found.difference is None and found.pairs == {"x": "x", "t0": "tanh"}
    overlay[1][1] = (False, " = exp(")
    assert equivalence.match_lines(stock, overlay).difference.line == 2
