"""pytest plugin (`-p gatelib.gloo`) that the gate loads into the runs of thunder's distributed test modules.

thunder's distributed tests come in two kinds. Methods of ``DistributedParallelTestCase`` subclasses (DDPTest,
FSDPTest, ...) start NCCL process groups and put their tensors on ``cuda:<rank>``: they cannot run on CPU as
written, and skip there with thunder's own reasons. Tests made by ``@instantiate(..., num_devices=2)`` around
``@distributed_wrapper(name, helper)`` run ``helper`` in one spawned process per device, and the helpers take
the device they are given: ``init_per_process_distributed`` in thunder/tests/distributed/helper.py starts gloo
for a CPU device. thunder instantiates those for CUDA only (``devicetypes=(devices.DeviceType.CUDA,)``).

This plugin makes ``instantiate`` also instantiate the CPU variant of every test of a
``thunder.tests.distributed`` module that asks for CUDA only, so that the gloo path runs: the variants are
named ``..._cpu_...`` (selected by the gate's ``-k "not cuda"``). One more thing differs: thunder's
``distributed_wrapper`` gives its pool of ranks 30 seconds (``TIMEOUT: int = 30``), and on a shared 2-core
machine two spawned ranks that import torch and thunder take longer than that before the test starts. The
plugin's wrapper (below) runs the helper the same way, one spawned process per device with the same
arguments, and raises the first failure of rank 0 as thunder's does, with RANK_TIMEOUT seconds instead. It
touches no test body and no thunder code; what fails on CPU fails on both sides and is reported as such.
"""

import os

PACKAGE = "thunder.tests.distributed"
RANK_TIMEOUT = int(os.environ.get("GATE_GLOO_TIMEOUT", "600"))


def _wrapper_call(self, test_stub):
    """thunder.tests.distributed.helper.distributed_wrapper.__call__ with RANK_TIMEOUT for the pool."""
    import multiprocessing as mp
    import tempfile
    from functools import wraps

    import pytest
    import torch

    if not torch.distributed.is_available():
        pytest.skip("This test requires torch.distributed be available")
    init_method = "file://" + tempfile.NamedTemporaryFile(delete=False).name

    @wraps(test_stub)
    def test_fn(executor, devices, dtype, **kwargs):
        data = [(init_method, len(devices), rank, executor, devices[rank], dtype, kwargs)
                for rank in range(len(devices))]
        pool = mp.get_context("spawn").Pool(len(devices))
        try:
            results = pool.map_async(self.fn, data, 1).get(RANK_TIMEOUT)
        finally:
            pool.close()
            pool.join()
        if results[0]:  # rank 0 returns the exceptions it caught
            raise results[0][0]

    return test_fn


def pytest_configure(config):
    from thunder.core import devices
    from thunder.tests import framework
    from thunder.tests.distributed import helper

    if getattr(framework.instantiate, "_gate_gloo", False):
        return
    original = framework.instantiate.__call__

    def __call__(self, test_template):
        if test_template.__module__.startswith(PACKAGE) and self.devicetypes == {devices.DeviceType.CUDA}:
            self.devicetypes = {devices.DeviceType.CUDA, devices.DeviceType.CPU}
        return original(self, test_template)

    framework.instantiate.__call__ = __call__
    framework.instantiate._gate_gloo = True
    if hasattr(helper, "distributed_wrapper"):  # defined only where torch.distributed is available
        helper.distributed_wrapper.__call__ = _wrapper_call


def pytest_report_header(config):
    return (f"gatelib.gloo: CPU (gloo) variants of thunder's CUDA-only distributed tests are instantiated; their "
            f"ranks get {RANK_TIMEOUT} s")
