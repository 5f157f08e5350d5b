"""A generated family for patch 0001: chains of @, +, *, -, transposes and scalar ops under autocast,
with user names that look like thunder's generated ones. Each program compiles, matches eager float64
and passes the trace checker.

CI runs a bounded, derandomized number of examples; THUNDER_OVERLAY_EXAMPLES=500 runs a long search.
"""

import os

import pytest
import thunder
from hypothesis import HealthCheck, given, settings, strategies as st
from thunder.transforms.autocast import autocast

from thunder_overlay import check_traces
from thunder_overlay.reproducers._common import assert_close, float64_copies, inputs

# 12 generated programs, each compiled and compared with eager float64: minutes
pytestmark = pytest.mark.slow

EXAMPLES = int(os.environ.get("THUNDER_OVERLAY_EXAMPLES", "12"))
NAMES = ["t0", "t1", "t2", "t3", "t5", "t12", "t_0", "t_1", "t_2", "i0", "u", "v", "act", "out", "gate", "tmp"]
BINARY = {"matmul": "{} @ {}", "add": "{} + {}", "mul": "{} * {}", "sub": "{} - {}"}
UNARY = {"transpose": "{}.mT", "scale": "{} * 0.5", "shift": "{} + 1.0"}


@st.composite
def programs(draw):
    depth = draw(st.integers(1, 8))
    names = draw(st.lists(st.sampled_from(NAMES), min_size=depth, max_size=depth, unique=True))
    values, lines = ["a", "b", "c"], []
    for name in names:
        op = draw(st.sampled_from(sorted(BINARY) + sorted(UNARY)))
        x = draw(st.sampled_from(values))
        if op in BINARY:
            y = draw(st.sampled_from([v for v in values if v != x]))  # x - x would cancel to zero
            lines.append(f"{name} = {BINARY[op].format(x, y)}")
        else:
            lines.append(f"{name} = {UNARY[op].format(x)}")
        values.append(name)
    extra = draw(st.lists(st.sampled_from(values[3:]), max_size=2, unique=True))
    outputs = [values[-1]] + [v for v in extra if v != values[-1]]
    body = "\n    ".join(lines + [f"return {', '.join(outputs)},"])
    return f"def program(a, b, c):\n    {body}\n"


def compile_program(source: str):
    namespace = {}
    exec(compile(source, "<generated program>", "exec"), namespace)
    return namespace["program"]


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(source=programs(), dtype=st.sampled_from(["bfloat16", "float16"]))
def test_generated_autocast_programs(source, dtype):
    fn = compile_program(source)
    args = inputs(3, shape=(4, 4))
    jfn = thunder.jit(autocast(fn, dtype=getattr(thunder, dtype)))
    results = jfn(*args)
    references = fn(*float64_copies(args))
    for i, (got, want) in enumerate(zip(results, references)):
        assert_close(got, want, dtype, f"output {i} of\n{source}")
    check_traces(jfn)
