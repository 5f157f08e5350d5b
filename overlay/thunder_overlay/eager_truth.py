"""I10's ground truth, taken from outside thunder: run the program eagerly and see which variable of which of its
frames held which tensor.

A name is a claim about a value. The check of that claim must not read what the interpreter under test recorded
(a series that binds a false name records it too), so ``record`` runs the program as plain PyTorch under
``sys.settrace``, watching only the program's own frames (code outside torch, thunder's package and the standard
library; thunder's tests and benchmarks are programs), and keeps every tensor each variable held.
``false_names`` then holds a jit's initial computation trace against it:

- an input of the trace is the very tensor the prologue hands the computation, matched by identity: its name
  is true only if a frame of the program held that object under that name;
- a value the trace computes is matched by shape: its name is false when the program never held a tensor of
  that shape under it (values are not compared, so a name given to another value of the same shape passes).

Only names the program binds somewhere are claims about it; generated names (``t_0``) and names no frame of the
program used are not checked here (I3 is).
"""

from __future__ import annotations

import os
import sys
import sysconfig


class EagerBindings:
    """What the program's frames held while it ran eagerly: every variable name a frame bound, and the tensors
    each held (kept alive, so their ids stay theirs). A name that held only other values (None, a list) holds
    no tensor: a tensor named after it is named falsely."""

    def __init__(self):
        import torch

        self.held: dict[str, dict[int, object]] = {}  # name -> id(tensor) -> tensor; every name a frame bound
        self._tensor = torch.Tensor  # looked up once: add runs for every local at every line of the program

    def add(self, name: str, value) -> None:
        tensors = self.held.setdefault(name, {})
        if isinstance(value, self._tensor):
            tensors[id(value)] = value

    def holds(self, name: str, tensor) -> bool:
        return self.held.get(name, {}).get(id(tensor)) is tensor

    def shapes(self, name: str) -> set[tuple[int, ...]]:
        return {tuple(t.shape) for t in self.held.get(name, {}).values()}


def _library_dirs() -> tuple[str, ...]:
    import thunder
    import torch

    paths = sysconfig.get_paths()
    # this package is not among them: its corpus and reproducers are programs, and none of its other code runs
    # while the program does
    return tuple(os.path.realpath(d) + os.sep for d in (os.path.dirname(torch.__file__),
                                                       os.path.dirname(thunder.__file__),
                                                       paths["stdlib"], paths["platstdlib"]))


def _program_dirs() -> tuple[str, ...]:
    import thunder

    thunder_dir = os.path.realpath(os.path.dirname(thunder.__file__))
    paths = sysconfig.get_paths()
    return tuple(d + os.sep for d in (os.path.join(thunder_dir, "tests"), os.path.join(thunder_dir, "benchmarks"),
                                      os.path.realpath(paths["purelib"]), os.path.realpath(paths["platlib"])))


def record(fn, args: tuple, kwargs: dict) -> EagerBindings:
    """Run ``fn(*args, **kwargs)`` eagerly and record every tensor a frame of the program held, by name. The
    program's result is returned by nothing: only what its frames bound is kept."""
    bindings = EagerBindings()
    library, program = _library_dirs(), _program_dirs()
    verdicts: dict[str, bool] = {}

    def is_program(filename: str) -> bool:
        if filename not in verdicts:
            # the longest folder that holds the file decides: torch and thunder lie in site-packages, which may lie
            # in the standard library's folder; another package there (litgpt) is a program, as thunder's tests are
            path = os.path.realpath(filename)
            folders = [(len(d), d in program) for d in (*program, *library) if path.startswith(d)]
            verdicts[filename] = max(folders, default=(0, True))[1]
        return verdicts[filename]

    def snapshot(frame) -> None:
        for name, value in frame.f_locals.items():
            bindings.add(name, value)

    def local(frame, event, arg):
        snapshot(frame)  # before each line and at the return: what the previous line bound
        return local

    def on_call(frame, event, arg):
        if event != "call" or not is_program(frame.f_code.co_filename):
            return None
        snapshot(frame)  # the parameters
        return local

    _call_watched(sys.settrace, sys.gettrace, on_call, _without_thunder_wrappers(fn, library), args, kwargs)
    return bindings


def _call_watched(install, installed, hook, fn, args: tuple, kwargs: dict) -> None:
    """``fn(*args, **kwargs)`` with ``hook`` installed as the trace or profile function, restored after."""
    previous = installed()
    install(hook)
    try:
        fn(*args, **kwargs)
    finally:
        install(previous)


def _without_thunder_wrappers(fn, library: tuple[str, ...]):
    """The program under thunder's own wrappers (``autocast(f)`` traces f on proxies when called eagerly): each
    hands the function it wraps the caller's tensors, which is what the eager run must see bound."""
    while hasattr(fn, "__wrapped__"):
        code = getattr(getattr(fn, "__func__", fn), "__code__", None)
        if code is None or not os.path.realpath(code.co_filename).startswith(library):
            break
        fn = fn.__wrapped__
    return fn


def computation_inputs(jfn, args: tuple, kwargs: dict, count: int) -> list | None:
    """The objects ``jfn`` hands its computation when called on these arguments: it is called again (from its
    cache) and the first function of thunder's generated code taking ``count`` parameters other than the
    prologue is caught as it starts. None where no such call was seen."""
    caught = []

    def on_call(frame, event, arg):
        code = frame.f_code
        if (event == "call" and not caught and code.co_filename.startswith("thunder.")
                and "prologue" not in code.co_filename and code.co_argcount == count):
            caught.append([frame.f_locals[n] for n in code.co_varnames[:count]])

    _call_watched(sys.setprofile, sys.getprofile, on_call, jfn, args, kwargs)
    return caught[0] if caught else None


def false_names(jfn, eager: EagerBindings, args: tuple, kwargs: dict) -> list[str]:
    """I10 violations of ``jfn``'s initial computation trace (its last call, made with ``args`` and ``kwargs``)
    against what the program's frames held in the eager run (see the module's docstring)."""
    import thunder
    from thunder.core.proxies import TensorProxy

    trace = thunder.last_traces(jfn)[0]
    found = []
    trace_args = list(trace.args)
    inputs = computation_inputs(jfn, args, kwargs, len(trace_args))
    if inputs is None:
        found.append("I10 unchecked for the inputs: the call of the computation was not seen")
    else:
        for position, (proxy, value) in enumerate(zip(trace_args, inputs)):
            if isinstance(proxy, TensorProxy) and proxy.name in eager.held and not eager.holds(proxy.name, value):
                found.append(f"I10: input {position} is named {proxy.name!r}, but no frame of the program held "
                             f"that tensor under {proxy.name!r} (eager run)")
    seen = {p.name for p in trace_args if isinstance(p, TensorProxy)}
    for bsym in trace.bound_symbols:
        for proxy in bsym.flat_proxy_outs:
            if not isinstance(proxy, TensorProxy) or proxy.name in seen or proxy.name not in eager.held:
                continue
            seen.add(proxy.name)
            if tuple(proxy.shape) not in eager.shapes(proxy.name):
                held = sorted(eager.shapes(proxy.name))
                found.append(f"I10: {proxy.name!r} names a value of shape {tuple(proxy.shape)}, but the program held "
                             + (f"only shapes {held}" if held else "no tensor") + f" under {proxy.name!r} (eager run)")
    return found
