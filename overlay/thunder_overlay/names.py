"""``thunder-overlay names``: which values stock thunder and the overlay name after the program's variables.

Each side runs in its own process and reports the initial computation trace of every program it jits, symbol
by symbol. The stock side runs stock thunder with one patch of the series, the one that keeps a module's order
of parameters: stock's order depends on the hash seed, and another order is another program, not another
naming of it. Both traces are one program up to renaming, so aligning them symbol for symbol pairs each stock
name with the overlay's name for the same value. The overlay side also reports, per value, every name the
program bound it to, in binding order (frames of thunder's own modules bind nothing). Invariant I5, "never worse than stock": a value stock names after one of its bindings is named
after one of its bindings by the overlay too, the same one or an earlier one that stock could not use.

Both sides also check every jit for I9 (a value the traces of one jit pass one to another has one name in all of
them), with ``checks.name_violations``, and I10 (a proxy named after a variable of the program holds the value the
program bound to it) against ``eager_truth``: the program run eagerly, outside thunder, before it is jitted, so
that no record of the interpreter under test is the truth (ThunderFX aside, which still uses the binding recorder).
A name is "gained" only where that check does not find it false. The overlay's violations fail the run as a lost
name does; stock's are reported.

A target is ``path/to/file.py:NAME`` or ``package.module:NAME``: the function or ``torch.nn.Module`` to jit.
The file provides its inputs as ``NAME_inputs`` (or ``inputs``): a callable returning a tuple of positional
arguments, or a dict with ``args`` and ``kwargs``. ``NAME_compiler = "thunderfx"`` (or ``--thunderfx``)
compiles with ``torch.compile(backend=ThunderCompiler())`` instead of ``thunder.jit``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from thunder_overlay import config, equivalence

CORPUS = "thunder_overlay.name_corpus"
TIMEOUT_S = config.NAMES_TIMEOUT_S


# ---------------------------------------------------------------------------------------------------------
# Child side: runs in a process of its own, with the overlay on or off.


def _load(target: str):
    import importlib
    import importlib.util

    location, sep, attr = target.rpartition(":")
    if not sep or not location or not attr:
        raise ValueError(f"target {target!r} is not FILE.py:NAME or package.module:NAME")
    if location.endswith(".py"):
        path = Path(location).resolve()
        if not path.is_file():
            raise FileNotFoundError(f"no such file: {location}")
        name = f"_thunder_overlay_names_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        sys.path.insert(0, str(path.parent))
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(location)
    if not hasattr(module, attr):
        raise AttributeError(f"{location} defines no {attr}")
    program = getattr(module, attr)
    inputs = getattr(module, f"{attr}_inputs", None) or getattr(module, "inputs", None)
    if inputs is None:
        raise AttributeError(f"{location} provides neither {attr}_inputs nor inputs")
    made = inputs() if callable(inputs) else inputs
    if isinstance(made, dict):
        args, kwargs = tuple(made.get("args", ())), dict(made.get("kwargs", {}))
    else:
        args, kwargs = (tuple(made) if isinstance(made, (tuple, list)) else (made,)), {}
    return program, args, kwargs, getattr(module, f"{attr}_compiler", "jit")


class _BindingCapture:
    """Records, for each trace the overlay's name allocation names (one trace a call, or every trace of a jit in
    one call), every name each proxy of the trace was bound to, keyed by the name the proxy has after allocation."""

    def __init__(self):
        import thunder.core.jit_ext as jit_ext
        from thunder.core.trace import TraceCtx

        self.calls: list[dict[str, list[str]]] = []
        self.available = hasattr(jit_ext, "_allocate_proxy_names")
        if self.available:
            allocate = jit_ext._allocate_proxy_names

            def capture(traces, bindings, *args):
                renames = allocate(traces, bindings, *args)
                for k, trace in enumerate([traces] if isinstance(traces, TraceCtx) else traces):
                    # the series returns each trace's renames (a list), or one dict for all
                    per_trace = renames[k] if isinstance(renames, list) else renames
                    self.calls.append(_bindings_by_final_name(trace, bindings, per_trace))
                return renames

            jit_ext._allocate_proxy_names = capture

    def for_trace(self, names: set[str]) -> dict[str, list[str]] | None:
        if not self.available or not self.calls:
            return None
        return max(self.calls, key=lambda call: len(names & call.keys()))


def _trace_proxy_ids(trace) -> set[int]:
    from thunder.core.proxies import Proxy
    from thunder.core.pytree import tree_iter

    from thunder_overlay.checks import _walk_bsyms

    ids = {id(p) for p in tree_iter((trace.args, trace.kwargs)) if isinstance(p, Proxy)}
    ids.update(id(p) for bsym in _walk_bsyms(trace.bound_symbols) for p in bsym.flat_proxy_outs)
    return ids


def _bindings_by_final_name(trace, bindings, renames) -> dict[str, list[str]]:
    in_trace = _trace_proxy_ids(trace)
    result: dict[str, list[str]] = {}
    for (pid, name, *by_thunder), p in bindings.items():
        if pid in in_trace and not any(by_thunder):  # a local of thunder's own code is not a binding of the program
            renamed = dict.get(renames, id(p))  # the series keys its renames by the id of the proxy they rename
            final = renamed.name if renamed is not None else p.name
            names = result.setdefault(final, [])
            if name not in names:
                names.append(name)
    return result


def _describe(trace) -> dict:
    """The trace's symbols in order (subsymbols after their symbol): depth, name, output and argument names."""
    symbols = []

    def walk(bsyms, depth):
        for b in bsyms:
            symbols.append([depth, b.sym.name, [p.name for p in b.flat_proxy_outs], [p.name for p in b.flat_proxy_args]])
            walk(b.subsymbols, depth + 1)

    walk(trace.bound_symbols, 0)
    return {"args": [getattr(p, "name", None) for p in trace.args], "symbols": symbols}


# A name a trace counts out (t5, i0): stock holding one that some thunder function also uses as a local (a t2
# in thunder's code) is a coincidence, not a leaked local
_COUNTED_OUT = re.compile(r"[a-z]+[0-9]+")


def _thunder_local_names() -> set[str]:
    """Every local variable name of thunder's own code (for telling its leaked locals from generated names)."""
    import types

    names: set[str] = set()
    seen: set[int] = set()

    def visit(code):
        if id(code) in seen:
            return
        seen.add(id(code))
        names.update(code.co_varnames, code.co_cellvars, code.co_freevars)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                visit(const)

    for module_name, module in list(sys.modules.items()):
        if module_name.split(".")[0] != "thunder" or module_name.split(".")[1:2] in (["tests"], ["benchmarks"]):
            continue
        for value in list(vars(module).values()):
            for candidate in (value, *vars(value).values()) if isinstance(value, type) else (value,):
                code = getattr(getattr(candidate, "__func__", candidate), "__code__", None)
                if isinstance(code, types.CodeType):
                    visit(code)
    return names


def jit_target(target: str, thunderfx: bool = False, eager_truth=None) -> list:
    """Load a target, compile it as it asks (thunder.jit, or ThunderFX), call it once; the jitted functions.
    With ``eager_truth`` (a list), each thunder.jit first runs the program eagerly, recording what its frames bound,
    and after its call gets the I10 violations that run shows appended (``eager_truth.false_names``)."""
    import thunder
    import torch

    program, args, kwargs, compiler = _load(target)
    if thunderfx or compiler == "thunderfx":
        from thunder.dynamo import ThunderCompiler

        torch._dynamo.reset()
        backend = ThunderCompiler()
        torch.compile(program, backend=backend)(*args, **kwargs)
        return [f for info in backend.subgraph_infos for f in (info.thunder_compiled_fns or ())]
    if eager_truth is not None:
        from thunder_overlay import eager_truth as truth

        try:
            eager = truth.record(program, args, kwargs)
        except Exception as e:  # a program only thunder runs (a trace's python_callable): no truth to check against
            eager = f"I10 unchecked: the program fails when run eagerly ({type(e).__name__}: {e})".splitlines()[0]
    jfn = thunder.jit(program)
    jfn(*args, **kwargs)
    if eager_truth is not None:
        eager_truth.append(eager if isinstance(eager, str) else truth.false_names(jfn, eager, args, kwargs))
    return [jfn]


def record(target: str, thunderfx: bool = False) -> dict:
    """Jit one target in this process and describe its initial computation traces, with the I9 and I10
    violations of each jit (``i9``, ``i10``: messages; ``i10`` None where the recorder did not see the jit)."""
    import thunder

    from thunder_overlay import checks

    capture = _BindingCapture()
    eager: list[list[str]] = []
    with checks.recording_bindings() as recorder:
        jfns = jit_target(target, thunderfx, eager_truth=eager)
    traces = []
    for k, jfn in enumerate(jfns):
        described = trace_record(thunder.last_traces(jfn)[0], capture)
        described["i9"], recorded = checks.name_violations(jfn, recorder)
        # I10's truth is the eager run of the program, never what the interpreter under test recorded. Under ThunderFX
        # (no eager run: thunder gets dynamo's graphs, called with their inputs) it is still the recorder's
        described["i10"] = eager[k] if k < len(eager) else [v for v in recorded or [] if v]
        if isinstance(described["i10"], str):
            described["i10_unchecked"], described["i10"] = described["i10"][:200], []
        traces.append(described)
    return {"traces": traces}


def trace_record(trace, capture: _BindingCapture) -> dict:
    """What ``compare`` reads of one side: the initial computation ``trace`` described symbol by symbol, and
    (overlay side) every name the program bound each of its values to, from ``capture``. For callers that
    jit in their own processes (the distributed check's ranks)."""
    described = _describe(trace)
    names = {n for s in described["symbols"] for n in s[2] + s[3]} | set(described["args"])
    described["bindings"] = capture.for_trace(names)
    return described


def child_main(targets: list[str], thunderfx: bool = False, report: str | None = None) -> None:
    """Jit every target; write the records, one JSON object a line, to the file ``report``: first this side's
    state, then one per target, then thunder's local names. Never to stdout or stderr, which the program owns:
    what it prints there cannot pass for a record. A program that exits (``sys.exit``) is a result."""
    import traceback
    import warnings

    warnings.filterwarnings("ignore")
    import thunder.core.jit_ext  # noqa: F401 - imported (and patched, unless the overlay is off) before status()
    import thunder_overlay

    status = thunder_overlay.status()
    state, patches = status["state"], status.get("patches") or []
    with open(report, "w", encoding="utf-8") as out:
        def send(record_: dict) -> None:
            out.write(json.dumps(record_) + "\n")
            out.flush()

        send({"side": {"state": state, "patches": patches}})
        internal = None
        for target in targets:
            try:
                result = {"ok": True, **record(target, thunderfx)}
            except (Exception, SystemExit) as e:  # a program stock thunder cannot compile is a result, not a tool failure
                result = {"ok": False, "error": _failure(e), "traceback": traceback.format_exc()[-2000:]}
            if internal is None:
                internal = sorted(_thunder_local_names())
            send({"target": target, "state": state, "patches": patches, **result})
        send({"thunder_locals": internal or []})


def _failure(error: BaseException) -> str:
    """One line for a program that failed: the exception, or, where the program called ``sys.exit`` (the jit
    wraps it in an InterpreterError), its exit status as the shell would report it."""
    cause = error
    while cause is not None and not isinstance(cause, SystemExit):
        cause = cause.__cause__ or cause.__context__
    if cause is None:
        return f"{type(error).__name__}: {error}".splitlines()[0][:300]
    if cause.code is None or isinstance(cause.code, int):
        return f"the program exited with status {cause.code or 0} (sys.exit)"
    return f"the program exited with status 1 (sys.exit): {str(cause.code)[:300]}"


# ---------------------------------------------------------------------------------------------------------
# Parent side: check the targets, run both sides, align, compare.


def _top_level_names(path: Path) -> set[str] | None:
    """The names a Python file binds at its top level (None: it star-imports or binds names dynamically, with
    ``globals()``, ``exec`` or ``setattr``, so any name may exist)."""
    import ast

    names = set()
    tree = ast.parse(path.read_bytes(), filename=str(path))
    dynamic = {"globals", "exec", "setattr", "vars"}
    if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in dynamic for n in ast.walk(tree)):
        return None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    return None
                names.add(alias.asname or alias.name.split(".")[0])
        else:
            names.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
    return names


def target_error(target: str) -> str | None:
    """What is wrong with ``target`` as given, found without running it (None: nothing found): the form, a
    missing file, a file that does not parse or defines neither the program nor its inputs, a module that
    cannot be found. What only running shows (an inputs() that raises) is reported per program."""
    import importlib.util

    location, sep, attr = target.rpartition(":")
    if not sep or not location or not attr.isidentifier():
        return f"{target!r} is not FILE.py:NAME or package.module:NAME"
    if location.endswith(".py"):
        path = Path(location)
        try:
            mode = path.stat().st_mode
        except (FileNotFoundError, NotADirectoryError):
            return f"{target}: no such file: {location}"
        except OSError as e:
            return f"{target}: cannot read {location}: {e.strerror}"
        if stat.S_ISDIR(mode):
            return f"{target}: {location} is a folder, not a Python file"
        if not stat.S_ISREG(mode):
            return f"{target}: {location} is not a regular file"
        try:
            defined = _top_level_names(path)
        except OSError as e:
            return f"{target}: cannot read {location}: {e.strerror}"
        except (SyntaxError, ValueError, UnicodeDecodeError) as e:
            return f"{target}: {location} does not parse: {e}"
        if defined is not None:
            if attr not in defined:
                return f"{target}: {location} defines no {attr}"
            if f"{attr}_inputs" not in defined and "inputs" not in defined:
                return f"{target}: {location} defines neither {attr}_inputs() nor inputs() (the program's arguments)"
        return None
    if not all(part.isidentifier() for part in location.split(".")):
        return f"{target!r} is not FILE.py:NAME or package.module:NAME"
    try:
        found = importlib.util.find_spec(location.split(".")[0])
    except (ImportError, ValueError) as e:
        return f"{target}: cannot find module {location}: {e}"
    return None if found is not None else f"{target}: no module named {location.split('.')[0]}"


@dataclass
class Comparison:
    target: str
    error: str | None = None
    stock_named: int = 0  # values stock names after one of their bindings
    overlay_named: int = 0
    kept: int = 0  # same name on both sides
    earlier: list[tuple[str, str]] = field(default_factory=list)  # (stock, overlay): an earlier binding
    gained: list[tuple[str, str]] = field(default_factory=list)  # stock generated, the overlay a binding
    lost: list[tuple[str, str]] = field(default_factory=list)  # stock a binding, the overlay none
    later: list[tuple[str, str]] = field(default_factory=list)  # stock a binding, the overlay a later one
    internal: list[tuple[str, str]] = field(default_factory=list)  # stock a thunder-internal local
    both_failed: bool = False  # the program fails under stock thunder too: nothing to compare
    # I9 and I10 (checks.name_violations), per side: messages; stock's are reported, never a failure
    i9: list[str] = field(default_factory=list)
    i10: list[str] = field(default_factory=list)
    stock_i9: list[str] = field(default_factory=list)
    stock_i10: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)  # the overlay's jits whose I10 could not be checked, and why

    @property
    def violations(self) -> int:
        return (len(self.lost) + len(self.later) + len(self.i9) + len(self.i10)
                + (1 if self.error and not self.both_failed else 0))

    def as_dict(self) -> dict:
        return {"program": self.target, "error": self.error, "both_failed": self.both_failed,
                "stock_named": self.stock_named, "overlay_named": self.overlay_named, "kept": self.kept,
                "lost": self.lost + self.later, "earlier": self.earlier, "gained": self.gained,
                "internal": self.internal, "i9": self.i9, "i10": self.i10,
                "stock_i9": self.stock_i9, "stock_i10": self.stock_i10, "i10_unchecked": self.unchecked}


def _lines(described: dict) -> list[list]:
    """A trace record as lines of pieces for the comparator: the inputs, then one line per symbol (indented by
    depth: ``outputs = symbol(arguments)``), with every proxy name marked as one."""
    def names(items):
        pieces = []
        for k, name in enumerate(items):
            pieces += ([(False, ", ")] if k else []) + [(True, name) if name is not None else (False, "None")]
        return pieces

    lines = [[(False, "inputs: "), *names(described["args"])]]
    for depth, symbol, outs, args in described["symbols"]:
        head = [(False, "  " * depth), *names(outs), (False, " = ")] if outs else [(False, "  " * depth)]
        lines.append([*head, (False, f"{equivalence.normalise(symbol)}("), *names(args), (False, ")")])
    return lines


def _align(stock: dict, overlay: dict) -> dict[str, str]:
    """Overlay name -> stock name of the same value; raises ValueError when the traces are not one program up to
    renaming (the comparator of invariant I7, on the symbols' names and their proxy arguments and outputs)."""
    found = equivalence.match_lines(_lines(stock), _lines(overlay))
    if found.difference is not None:
        raise ValueError(f"the traces are not one program up to renaming: {found.difference}")
    return {o: s for s, o in found.pairs.items()}


def _name_violations(side: dict) -> tuple[list[str], list[str], bool]:
    """A side's I9 and I10 violations over its traces, and whether the recorder saw every jit it checked (a trace
    record without ``i10``, as ``trace_record`` alone makes, was not checked for I9 or I10)."""
    traces = side.get("traces", []) if side["ok"] else []
    i9 = [v for t in traces for v in t.get("i9") or []]
    i10 = [v for t in traces for v in t.get("i10") or []]
    return i9, i10, all(t.get("i10", ()) is not None for t in traces)


def compare(target: str, stock: dict, overlay: dict, thunder_locals: set[str]) -> Comparison:
    result = Comparison(target)
    result.stock_i9, result.stock_i10, _ = _name_violations(stock)
    result.i9, result.i10, i10_checked = _name_violations(overlay)
    result.unchecked = [t["i10_unchecked"] for t in overlay.get("traces") or [] if t.get("i10_unchecked")]
    if overlay["ok"] and not i10_checked:
        result.error = "the overlay side did not record the program's bindings of a jit (I10 unchecked)"
        return result
    if not overlay["ok"] and not stock["ok"]:
        result.error, result.both_failed = f"fails under stock thunder too: {stock['error']}", True
        return result
    if not overlay["ok"]:
        result.error = f"overlay failed: {overlay['error']}"
        return result
    if not stock["ok"]:
        result.error = None  # nothing stock names can be lost; count what the overlay names
        for trace in overlay["traces"]:
            bindings = trace["bindings"] or {}
            result.overlay_named += sum(1 for name, bound in bindings.items() if name in bound)
        return result
    if len(stock["traces"]) != len(overlay["traces"]):
        result.error = f"stock jitted {len(stock['traces'])} programs, the overlay {len(overlay['traces'])}"
        return result
    for s_trace, o_trace in zip(stock["traces"], overlay["traces"]):
        # a name counts as gained only where the eager run confirms it: it ran, and did not find the name false
        false = {name for v in o_trace.get("i10") or [] for name in v.split("'")[1::2]}
        confirmed = not o_trace.get("i10_unchecked")
        if o_trace["bindings"] is None:
            result.error = "the overlay side reports no bindings (is the overlay active?)"
            return result
        try:
            to_stock = _align(s_trace, o_trace)
        except ValueError as e:
            result.error = str(e)
            return result
        for o_name, s_name in to_stock.items():
            bound = o_trace["bindings"].get(o_name, [])
            stock_user, overlay_user = s_name in bound, o_name in bound
            result.stock_named += stock_user
            result.overlay_named += overlay_user
            if stock_user and overlay_user:
                if o_name == s_name:
                    result.kept += 1
                elif bound.index(o_name) < bound.index(s_name):
                    result.earlier.append((s_name, o_name))
                else:
                    result.later.append((s_name, o_name))
            elif stock_user:
                result.lost.append((s_name, o_name))
            elif overlay_user and confirmed and o_name not in false:
                result.gained.append((s_name, o_name))
            elif s_name != o_name and s_name in thunder_locals and not _COUNTED_OUT.fullmatch(s_name):
                result.internal.append((s_name, o_name))
    return result


# Both sides run with one hash seed: where thunder's order of a module's parameters depends on it (stock
# collects member names in a set), two seeds would make two different programs, not one program named two ways.
HASH_SEED = "0"


def _overlay_side_state(timeout: float = TIMEOUT_S) -> str:
    code = "import thunder_overlay; print(thunder_overlay.status(import_thunder=False)['state'])"
    env = dict(os.environ, THUNDER_OVERLAY="1")
    try:
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                              errors="backslashreplace", timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"unknown: the status process did not finish within {timeout} s"
    return proc.stdout.strip().splitlines()[-1] if proc.returncode == 0 and proc.stdout.strip() else (
        f"unknown: {proc.stderr.strip()[-300:]}")


# The series' patch that keeps a module's order of parameters and buffers; it names nothing
ORDER_PATCH = "jit-keep-the-module-s-order-of-parameters-and-buffers.patch"


def order_only_series(folder: Path) -> Path | None:
    """A copy of the patch directory in ``folder`` whose every series is the order patch alone, or None when a
    series lacks it. Stock's order of ``module.parameters()`` under thunder.jit depends on the hash seed (a
    set), the overlay's is the module's: stock with this one patch traces the program the overlay traces, with
    stock's names."""
    from thunder_overlay import manifest
    from thunder_overlay.patchset import parse_patch

    source = Path(config.patches_dir()[0])
    text = (source / config.MANIFEST).read_text()
    seen = set()
    for base in manifest.load(source):
        order = [p for p in base.directory.glob(f"*-{ORDER_PATCH}")]
        if len(order) != 1:
            return None
        # A base lists the files its series changes; the order patch alone changes fewer. Bases that then list
        # the same bytes (0.2.1 and 0.2.2 share jit_ext.py) are one base for this series: the first serves both.
        changed = set(parse_patch(order[0].read_text(encoding="utf-8"), str(order[0])).patched_paths())
        files = tuple(sorted((p, h) for p, h in base.files.items() if p in changed))
        if files in seen:
            text = manifest.without_base(text, base.name)
            continue
        seen.add(files)
        text = manifest.with_files(text, base.name, dict(files))
        (folder / base.name).mkdir()
        shutil.copy(order[0], folder / base.name / order[0].name)
        (folder / base.name / "series").write_text(order[0].name + "\n")
    (folder / config.MANIFEST).write_text(text)
    return folder


def run_side(targets: list[str], overlay: bool, thunderfx: bool = False, timeout: float = TIMEOUT_S,
             stock_patches: Path | None = None) -> tuple[dict, set]:
    """Run one side's process: ({target: record}, thunder's local names). A target the process did not report
    (it exited, crashed or ran past ``timeout`` seconds first) gets a failed record that says so (``ended``,
    ``timed_out``). The program's stdout is discarded and its stderr kept for that message: the records come
    through a file of their own."""
    env = dict(os.environ, THUNDER_OVERLAY="1" if overlay else "0", PYTHONWARNINGS="ignore")
    if not overlay and stock_patches is not None:
        # its own bytecode cache, so that the user's cached patched module stays the full series'
        env.update(THUNDER_OVERLAY="1", THUNDER_OVERLAY_PATCHES=str(stock_patches),
                   THUNDER_OVERLAY_CACHE_DIR=str(stock_patches / "cache"))
    env.setdefault("PYTHONHASHSEED", HASH_SEED)
    if env["PYTHONHASHSEED"] == "random":
        env["PYTHONHASHSEED"] = HASH_SEED
    side = "overlay" if overlay else "stock"
    code = "import sys; from thunder_overlay import names; names.child_main(sys.argv[3:], sys.argv[1] == '1', sys.argv[2])"
    with tempfile.TemporaryDirectory(prefix=f"thunder-overlay-names-{side}-") as tmp:
        report, errors = os.path.join(tmp, "records.jsonl"), os.path.join(tmp, "stderr")
        timed_out = False
        with open(errors, "wb") as stderr:
            try:
                proc = subprocess.run([sys.executable, "-c", code, "1" if thunderfx else "0", report, *targets],
                                      env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                                      timeout=timeout)
                ended = f"the {side} process exited with status {proc.returncode}"
            except subprocess.TimeoutExpired:
                timed_out, ended = True, f"the {side} process did not finish within {timeout:g} s (--timeout)"
        tail = Path(errors).read_bytes()[-500:].decode("utf-8", "backslashreplace").strip()
        records = _read_records(report)
    results, thunder_locals, side_state = {}, set(), {}
    for record_ in records:
        if "side" in record_:
            side_state = record_["side"]
        elif "thunder_locals" in record_:
            thunder_locals = set(record_["thunder_locals"])
        elif "target" in record_:
            results[record_["target"]] = record_
    for target in targets:
        results.setdefault(target, {"ok": False, "state": side_state.get("state", "?"), "timed_out": timed_out,
                                    "patches": side_state.get("patches", []), "ended": ended,
                                    "error": f"{ended} before reporting this program" + (f": {tail}" if tail else "")})
    return results, thunder_locals


def _read_records(path: str) -> list[dict]:
    """The JSON records a side's process wrote (a last line cut short by a killed process is left out)."""
    records = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    records.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return [r for r in records if isinstance(r, dict)]


def corpus_targets() -> list[str]:
    from thunder_overlay import name_corpus

    return [f"{CORPUS}:{name}" for name in name_corpus.PROGRAMS]


def _pairs(pairs: list[tuple[str, str]]) -> str:
    return ", ".join(f"{s} -> {o}" for s, o in pairs)


def print_table(comparisons: list[Comparison], out=sys.stdout) -> None:
    header = f"{'program':<28} {'stock':>6} {'overlay':>7} {'lost':>5} {'I9':>3} {'I10':>3} {'internal':>8}  notes"
    print(header, file=out)
    print("-" * len(header), file=out)
    for c in comparisons:
        name = c.target.rpartition(":")[2]
        if c.error and not c.stock_named:
            print(f"{name:<28} {'':>6} {'':>7} {'':>5} {'':>3} {'':>3} {'':>8}  ERROR: {c.error}", file=out)
            continue
        notes = []
        if c.lost or c.later:
            notes.append(f"LOST {_pairs(c.lost + c.later)}")
        notes += [v.replace(": ", " ", 1) for v in c.i9 + c.i10] + c.unchecked
        if c.stock_i9 or c.stock_i10:
            notes.append(f"stock {len(c.stock_i9)} I9, {len(c.stock_i10)} I10")
        if c.earlier:
            notes.append(f"earlier binding {_pairs(c.earlier)}")
        if c.gained:
            notes.append(f"gained {_pairs(c.gained[:6])}{' ...' if len(c.gained) > 6 else ''}")
        if c.internal:
            notes.append(f"thunder locals removed {', '.join(sorted({s for s, _ in c.internal}))}")
        print(f"{name:<28} {c.stock_named:>6} {c.overlay_named:>7} {len(c.lost) + len(c.later):>5} {len(c.i9):>3} "
              f"{len(c.i10):>3} {len(c.internal):>8}  {'; '.join(notes)}", file=out)
    lost = sum(len(c.lost) + len(c.later) for c in comparisons)
    counts = _violation_counts(comparisons)
    print(f"\n{len(comparisons)} programs: stock names {sum(c.stock_named for c in comparisons)} values after the "
          f"program's variables, the overlay {sum(c.overlay_named for c in comparisons)}; {lost} lost, "
          f"{counts['i9']} I9, {counts['i10']} I10 (I9: a value the traces of a jit pass on has one name in all; "
          "I10: a proxy named after a variable of the program holds the value the program bound to it)\n"
          f"stock: {counts['stock_i9']} I9, {counts['stock_i10']} I10 (reported, not failures)", file=out)


def _violation_counts(comparisons: list[Comparison]) -> dict[str, int]:
    return {key: sum(len(getattr(c, key)) for c in comparisons) for key in ("i9", "i10", "stock_i9", "stock_i10")}


def run_both(targets: list[str], thunderfx: bool = False, announce: bool = False,
             timeout: float = TIMEOUT_S) -> tuple[dict, set, dict]:
    """Both sides at once: (stock's records, stock's thunder locals, the overlay's records)."""
    from concurrent.futures import ThreadPoolExecutor

    with tempfile.TemporaryDirectory(prefix="thunder-overlay-names-") as tmp, ThreadPoolExecutor(2) as pool:
        order = order_only_series(Path(tmp))
        if announce:
            print(f"names: {len(targets)} program(s), stock ("
                  + ("with only the series' module-order patch, so that both sides trace one program" if order else
                     "THUNDER_OVERLAY=0") + ") and overlay, one process each", flush=True)
        stock_future = pool.submit(run_side, targets, False, thunderfx, timeout, stock_patches=order)
        overlay_future = pool.submit(run_side, targets, True, thunderfx, timeout)
        (stock, stock_locals), (overlay, _) = stock_future.result(), overlay_future.result()
    return stock, stock_locals, overlay


# Exit status when a side ran past --timeout (nothing is compared: the other codes are the README's)
TIMED_OUT = 4


def main(targets: list[str], thunderfx: bool = False, show_traces: bool = False, as_json: bool = False,
         timeout: float = TIMEOUT_S) -> int:
    """0: no value lost; 1: the overlay lost a name stock gives, broke I9 or I10, or failed where stock ran; 2: a
    target is malformed, or a side did not run as it should; 3: a program fails under both (nothing compared);
    4: a side ran past ``timeout`` seconds."""
    errors = [e for e in map(target_error, targets) if e]
    if errors:
        for error in errors:
            print(f"thunder-overlay names: error: {error}", file=sys.stderr)
        return 2
    # What the overlay side's import would do, before minutes of tracing: status() without importing thunder
    ahead = _overlay_side_state()
    if ahead not in config.READY_STATES:
        print(f"the overlay side would not run patched (state {ahead}); see `THUNDER_OVERLAY=1 thunder-overlay status`",
              file=sys.stderr)
        return 2
    stock, stock_locals, overlay = run_both(targets, thunderfx, announce=not as_json, timeout=timeout)
    late = [r["ended"] for r in (*stock.values(), *overlay.values()) if r.get("timed_out")]
    if late:
        print(f"thunder-overlay names: {late[0]}; nothing compared. A longer --timeout, or fewer programs at a "
              "time.", file=sys.stderr)
        return TIMED_OUT
    stock_states = {r.get("state") for r in stock.values()}
    if stock_states - {"disabled", *config.PATCHED_STATES}:
        print(f"the stock side did not run as stock with the order patch (state {', '.join(sorted(map(str, stock_states)))})"
              + _first_error(stock), file=sys.stderr)
        return 2
    states = {r.get("state") for r in overlay.values()}
    if not states <= set(config.PATCHED_STATES):
        print(f"the overlay side did not run patched (state {', '.join(sorted(map(str, states)))}); "
              "see `thunder-overlay status`" + _first_error(overlay), file=sys.stderr)
        return 2
    comparisons = [compare(target, stock[target], overlay[target], stock_locals) for target in targets]
    status = 1 if any(c.violations for c in comparisons) else 3 if any(c.both_failed for c in comparisons) else 0
    if as_json:
        print(json.dumps({"exit_status": status, "overlay_state": sorted(states),
                          "lost": sum(len(c.lost) + len(c.later) for c in comparisons),
                          **_violation_counts(comparisons),
                          "programs": [c.as_dict() for c in comparisons]}))
        return status
    if "patched-unverified" in states:
        print("note: the overlay side ran patched-unverified (a base chosen with THUNDER_OVERLAY_BASE)")
    if show_traces:
        for target in targets:
            _print_side_by_side(target, stock[target], overlay[target])
    print()
    print_table(comparisons)
    for target in targets:
        if not stock[target]["ok"] and overlay[target]["ok"]:
            print(f"note: stock failed on {target}: {stock[target]['error']}")
    return status


def _first_error(records: dict) -> str:
    """The first failure of a side whose state is unknown (its process ended before saying it), for a message."""
    unknown = [r["error"] for r in records.values() if r.get("state") == "?" and r.get("error")]
    return f": {unknown[0]}" if unknown else ""


def _print_side_by_side(target: str, stock: dict, overlay: dict) -> None:
    print(f"\n== {target}")
    if not (stock["ok"] and overlay["ok"]):
        print(f"  stock: {stock.get('error', 'ok')}\n  overlay: {overlay.get('error', 'ok')}")
        return
    for s_trace, o_trace in zip(stock["traces"], overlay["traces"]):
        bindings = o_trace["bindings"] or {}
        print(f"  {'stock':<34} {'overlay':<34} names the program bound the value to")
        rows = [(s, o) for s, o in zip(s_trace["args"], o_trace["args"])]
        for (depth, sym, s_out, _), (_, _, o_out, _) in zip(s_trace["symbols"], o_trace["symbols"]):
            if depth == 0 and sym not in ("unpack_trivial", "python_return"):
                rows += [(f"{s} = {sym}", f"{o} = {sym}") for s, o in zip(s_out, o_out)]
        for s, o in rows:
            name = o.split(" = ")[0]
            mark = " " if s.split(" = ")[0] == name else "*"
            print(f"{mark} {s:<34} {o:<34} {', '.join(bindings.get(name, []))}")
