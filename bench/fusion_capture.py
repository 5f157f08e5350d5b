"""Child process of fusion_identity.py: compile workloads on fake CUDA inputs, without running them, and
print what thunder hands the executors as one JSON line.

    python bench/fusion_capture.py WORKLOAD --modes inference grad --executors nvfuser torch [--distributed CONFIG]

Stock or overlay is decided by THUNDER_OVERLAY in the environment, as for every thunder import here.
Inputs and parameters are torch FakeTensors on cuda:0: models are built on ``meta`` and their tensors
swapped for fake ones (no op ever runs on a fake tensor that requires grad: that aborts the process).
``compile_data(jfn)._get_computation_and_inputs(*args)`` traces, transforms and runs the prologue only;
the computation is never called. For each nvFusion region the FusionDefinition thunder would build at
its first call is built as that call builds it: the region's ``to_descriptors`` on tensors of its inputs'
shapes (contiguous, on ``meta``), then its ``get_fd``; printed with ``str(fd)``: nvFuser's host IR, nothing
compiled or launched. Where that path cannot run because this stack lacks the nvFuser module the thunder
release imports there (thunder 0.2.6 with the nvFuser 0.2.36 wheels, which ship only ``nvfuser_direct``), the
case fails with ``NvFuserCannotRun``: fusion_identity.py reports it as such, never as identical. Where the
module is there but cannot load without a GPU (the legacy ``nvfuser`` needs libcuda), the descriptors come
from ``nvfuser_direct``'s function of the same name, which the CUDA stand-in serves.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from thunder_overlay.equivalence import proxy_names  # noqa: E402  (distributed_capture.py imports it from here)

DEVICE = "cuda:0"
STANDIN_ENV = "THUNDER_OVERLAY_CUDA_STANDIN"  # set by fusion_identity.py when it preloads the stand-in


def _fake_like(mode, t, requires_grad: bool):
    import torch

    with mode:
        fake = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=DEVICE)
    return fake.requires_grad_(requires_grad)


def _fake_module(mode, module, grad: bool):
    import torch

    for sub in module.modules():
        for name, p in list(sub._parameters.items()):
            if p is not None:
                sub._parameters[name] = torch.nn.Parameter(_fake_like(mode, p, False), requires_grad=grad)
        for name, b in list(sub._buffers.items()):
            if b is not None:
                sub._buffers[name] = _fake_like(mode, b, False)
    return module


def _rebind_device(fn):
    # seed946 closes over the device it was built for (clang.uniform's device=)
    if isinstance(fn, functools.partial) and "device" in fn.keywords:
        return functools.partial(fn.func, *fn.args, **dict(fn.keywords, device=DEVICE))
    return fn


def _without_gpu_context():
    """Under the CUDA stand-in, torch sees one device, and a fake tensor's first creation on it would
    allocate a real one (``init_gpu_context``, which needs the driver). That allocation only prepares a
    backward *run* on fake tensors, which this check never does, so it is answered once per device, as
    on a machine without CUDA, before any fake tensor exists."""
    from unittest import mock

    import torch
    from torch._subclasses import fake_tensor

    if not os.environ.get(STANDIN_ENV):
        return
    with mock.patch.object(torch.cuda, "is_available", return_value=False):
        for device in ("cuda", DEVICE):
            fake_tensor.init_gpu_context(torch.device(device))


def build_fake(workload, grad: bool):
    """``(fn_or_module, args)`` of a bench workload with fake cuda:0 tensors."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    _without_gpu_context()
    mode = FakeTensorMode()
    if workload.name == "seed946-retrace":
        # its builder traces the program for the device it is given: trace it for cuda:0 on fake inputs
        import thunder

        fn, args = build_fake(_workloads().BY_NAME["seed946"], grad=False)
        fn = thunder.trace()(fn, *args).python_callable()
        return fn, tuple(a.detach().requires_grad_(grad) for a in args)
    fn, args = workload.build("meta")
    if isinstance(fn, torch.nn.Module):
        fn = _fake_module(mode, fn, grad)
    fn = _rebind_device(fn)
    fake_args = tuple(
        _fake_like(mode, a, grad and a.is_floating_point()) if isinstance(a, torch.Tensor) else a for a in args
    )
    return fn, fake_args


def _workloads():
    import workloads

    return workloads


def _load_workloads_file(path: str) -> None:
    """Make ``import workloads`` give the module at ``path`` (a changed copy, to test the check)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("workloads", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["workloads"] = module
    spec.loader.exec_module(module)


def executors_for(kind: str):
    """thunder's default executors (nvFuser registered, first among the fusion executors) or torch alone."""
    import thunder

    if kind == "torch":
        return [thunder.extend.get_executor("torch")]
    from thunder.executors import nvfuser_available

    if not nvfuser_available():
        raise RuntimeError("nvFuser is not available to thunder in this process")
    default = list(thunder.get_default_executors())
    assert any(e.name == "nvfuser" for e in default), [e.name for e in default]
    return default


class NvFuserCannotRun(RuntimeError):
    """The nvFuser executor cannot run a region's first call on this stack (a module it imports is missing)."""


def _meta_like(proxy):
    import thunder.torch as ltorch
    import torch

    return torch.empty(tuple(int(s) for s in proxy.shape), dtype=ltorch.to_torch_dtype(proxy.dtype), device="meta")


def _first_call_descriptors(region: str, wrapper, args) -> tuple:
    """What the region's first call computes from its inputs (``FusionDefinitionWrapper.__call__``)."""
    from thunder.core.proxies import TensorProxy

    try:
        return wrapper.to_descriptors(tuple(_meta_like(x) if isinstance(x, TensorProxy) else x for x in args))
    except ModuleNotFoundError as e:
        raise NvFuserCannotRun(f"thunder's first call of {region} imports {e.name}, which this nvFuser does "
                               f"not ship ({e})") from None
    except (ImportError, OSError):  # the module exists but needs a GPU to load: what the stand-in serves
        return tuple(
            _contiguous_descriptor(tuple(int(s) for s in x.shape)) if isinstance(x, TensorProxy) else None
            for x in args
        )


def _contiguous_descriptor(shape: tuple[int, ...]) -> tuple:
    """What thunder's ``to_runtime_descriptors`` gives a contiguous tensor of ``shape`` (no DTensor).
    thunder asks the legacy ``nvfuser`` module, whose import needs libcuda; nvfuser_direct has the same
    function."""
    from nvfuser_direct import compute_tensor_descriptor

    strides, acc = [], 1
    for size in reversed(shape):
        strides.insert(0, acc)
        acc *= max(size, 1)
    return tuple(tuple(x) for x in compute_tensor_descriptor(shape, tuple(strides))) + ((),)


def fusion_definitions(trace) -> dict[str, str]:
    """``str(fd)`` for each nvFusion region of an execution trace, built as at the region's first call
    on contiguous inputs."""
    out = {}
    for bsym in trace.bound_symbols:
        if not bsym.sym.is_fusion or not bsym.sym.name.startswith("nvFusion"):
            continue
        wrapper = bsym._call_ctx[bsym.sym.name]
        out[bsym.sym.name] = str(wrapper.get_fd(_first_call_descriptors(bsym.sym.name, wrapper, bsym.flat_args)))
    return out


def fake_process_group() -> None:
    """torch's fake process group (2 ranks, this one rank 0): collectives trace, nothing is sent."""
    import torch.distributed as tdist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if not tdist.is_initialized():
        tdist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)


def distributed(workload, grad: bool, config: str, executors):
    """``ddp(thunder.jit(m))`` or ``fsdp(thunder.jit(m), device=cuda:0)`` of a module workload on fake cuda:0
    tensors, under the fake process group. The module is built without gradients and its parameters (the
    sharded ones and the originals fsdp leaves on ``meta``) made to require them after wrapping: fsdp copies
    and moves each parameter, and an op on a fake tensor that requires grad aborts the process (see
    ``_without_gpu_context``). fsdp copies ``requires_grad`` from the parameter it shards, so the traced
    program is the same. ddp is given ``broadcast_from=None``: a broadcast sends nothing on the fake group."""
    import thunder
    import torch
    from distributed_capture import wrap

    fake_process_group()
    fn, args = build_fake(workload, grad=False)
    if not isinstance(fn, torch.nn.Module):
        raise TypeError(f"{workload.name} is not a module: ddp and fsdp wrap modules")
    jfn = wrap(thunder.jit(fn, executors=executors), config, device=DEVICE, broadcast_from=None)
    if grad:
        for p in (*jfn.parameters(), *jfn._model.parameters()):
            p.requires_grad_(True)
    return jfn, args


def capture(workload, grad: bool, kind: str, config: str | None = None) -> dict:
    import thunder

    executors = executors_for(kind)
    if config:
        jfn, args = distributed(workload, grad, config, executors)
    else:
        fn, args = build_fake(workload, grad)
        jfn = thunder.jit(fn, executors=executors)
    thunder.compile_data(jfn)._get_computation_and_inputs(*args)
    result = {"executors": [e.name for e in executors]}
    traces = {"forward": thunder.last_traces(jfn)[-1]}
    backward = thunder.last_backward_traces(jfn)
    if backward:
        traces["backward"] = backward[-1]
    for which, trc in traces.items():
        result[which] = {"text": str(trc), "proxies": proxy_names(trc), "fusions": fusion_definitions(trc)}
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("--modes", nargs="+", default=["inference", "grad"])
    parser.add_argument("--executors", nargs="+", default=["nvfuser", "torch"])
    parser.add_argument("--workloads-file", help="load the workloads from this copy of workloads.py")
    parser.add_argument("--distributed", metavar="CONFIG",
                        help="wrap the module in ddp or fsdp under torch's fake process group (ddp, fsdp-zero2-none, ...)")
    opts = parser.parse_args(argv)
    if opts.workloads_file:
        _load_workloads_file(opts.workloads_file)

    import thunder_overlay

    state = thunder_overlay.status()["state"]
    workload = _workloads().BY_NAME[opts.workload]
    cases = []
    for mode in opts.modes:
        for kind in opts.executors:
            case = {"workload": workload.name, "mode": mode, "executors_kind": kind, "distributed": opts.distributed}
            try:
                case.update(capture(workload, mode == "grad", kind, opts.distributed))
            except Exception as e:  # a crash of this side is a result (stock crashes on #283)
                case["error"] = f"{type(e).__name__}: {e}"[:2000]
                case["traceback"] = traceback.format_exc()[-4000:]
            cases.append(case)
    print(json.dumps({"overlay_state": state, "cases": cases}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
