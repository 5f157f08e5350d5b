"""Digests of the traces thunder.jit makes of each corpus program, in this process: invariant I6 says they are
the same in every process, whatever PYTHONHASHSEED. Run as a child: ``python -m thunder_overlay.trace_digest``
prints one JSON line per program, {"target", "ok", "traces": {kind: sha256 of the trace's text}}."""

from __future__ import annotations

import hashlib
import json
import re
import sys

MARK = "TRACE-DIGEST "


def _text(trace) -> str:
    # Symbols of torch.autograd.Function subclasses carry the class's id, and a trace's provenance line the
    # time its pass took: both differ between processes
    text = re.sub(r"\(took \d+ milliseconds\)", "", str(trace))
    return re.sub(r"_[0-9]{6,}", "", text)


def digests(target: str) -> dict[str, str]:
    import thunder
    import torch

    from thunder_overlay.names import _load

    program, args, kwargs, compiler = _load(target)
    if compiler == "thunderfx":
        from thunder.dynamo import ThunderCompiler

        torch._dynamo.reset()
        backend = ThunderCompiler()
        torch.compile(program, backend=backend)(*args, **kwargs)
        jitted = [f for info in backend.subgraph_infos for f in (info.thunder_compiled_fns or ())]
    else:
        jitted = [thunder.jit(program)]
        jitted[0](*args, **kwargs)
    found = {}
    for k, jfn in enumerate(jitted):
        traces = thunder.last_traces(jfn)
        found[f"{k}:initial"], found[f"{k}:final"] = traces[0], traces[-1]
        backward = thunder.last_backward_traces(jfn)
        if backward:
            found[f"{k}:backward"] = backward[-1]
    return {kind: hashlib.sha256(_text(trace).encode()).hexdigest()[:16] for kind, trace in found.items()}


def main(targets: list[str]) -> None:
    import warnings

    warnings.filterwarnings("ignore")
    for target in targets:
        try:
            record = {"target": target, "ok": True, "traces": digests(target)}
        except Exception as e:  # a program thunder cannot compile is a result
            record = {"target": target, "ok": False, "error": f"{type(e).__name__}: {e}".splitlines()[0][:200]}
        print(MARK + json.dumps(record), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
