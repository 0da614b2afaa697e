"""One Backend per compiled device: what the engine needs of it, composed in one
object (in the spirit of tinygrad's `Compiled`): the Target code is made for now,
the code generator and runtime that turn a schedule into something that runs
(`compile`), the code a kernel becomes (`code`), and what a run needs around it
(`start`: the CUDA driver is there; `finish`: wait for the GPU, so that timings
count the work).  The engine asks a device's backend, never its name; the
reference device, cpu_numpy(), has none (the IR's interpreter computes it).
"""
from __future__ import annotations

from dataclasses import replace

from .. import config
from ..backend_ndarray.devices import CPUDevice, CUDADevice
from ..codegen import cuda as cuda_codegen, llvm as llvm_codegen
from ..runtime import cpu as cpu_runtime, cuda as cuda_runtime, jit
from ..target import Target


class Backend:
    """A compiled device's target, compiler and runtime.  `eager_shortcut`: its eager
    primitives may skip the schedule cache's lookup (engine/eager.py: launches need
    no more than the run itself)."""

    name = ""
    eager_shortcut = False

    def target(self) -> Target: raise NotImplementedError
    def compile(self, schedule, target: Target): raise NotImplementedError
    def code(self, kernel, target: Target, optimized: bool = False) -> str: raise NotImplementedError
    def start(self) -> None: pass
    def finish(self) -> None: pass


class CPUBackend(Backend):
    """LLVM IR compiled by llvmlite's MCJIT, run by runtime/cpu.py."""

    name = "cpu"
    eager_shortcut = True

    def __init__(self):
        self._targets = {}

    def target(self) -> Target:
        """The host CPU with the current thread count, bounds checking and least work
        of a kernel worth its compile time."""
        settings = (config.THREADS, config.BOUNDS_CHECK, config.UNROLL_MIN_WORK)
        target = self._targets.get(settings)
        if target is None:
            host = jit.host_target(config.THREADS, config.BOUNDS_CHECK)
            target = self._targets[settings] = replace(host, unroll_min_work=config.UNROLL_MIN_WORK)
        return target

    def compile(self, schedule, target: Target):
        kernels = jit.compile_kernels([c.kernel for c in schedule.calls], target, llvm_codegen)
        return cpu_runtime.CompiledSchedule(schedule, kernels, target.threads, target.bounds_check)

    def code(self, kernel, target: Target, optimized: bool = False) -> str:
        return jit.llvm_ir(kernel, target, llvm_codegen, optimized)


class CUDABackend(Backend):
    """CUDA C compiled by nvcc through PyCUDA, run by runtime/cuda.py."""

    name = "cuda"
    _TARGETS = {flag: Target("cuda", 0, bounds_check=flag, grid=True) for flag in (False, True)}

    def target(self) -> Target:
        return self._TARGETS[bool(config.BOUNDS_CHECK)]

    def compile(self, schedule, target: Target):
        kernels = [c.kernel for c in schedule.calls]
        names = [f"k{i}_{k.name}" for i, k in enumerate(kernels)]
        source = cuda_codegen.render_module(kernels, names, bounds_check=target.bounds_check)
        if config.DEBUG >= 4:
            print(source)
        return cuda_runtime.CompiledSchedule(schedule, source, names, target.bounds_check)

    def code(self, kernel, target: Target, optimized: bool = False) -> str:
        return cuda_codegen.render_module([kernel], bounds_check=target.bounds_check)

    def start(self) -> None:
        cuda_runtime.require()

    def finish(self) -> None:
        cuda_runtime.synchronize()


CPU = CPUBackend()
CUDA = CUDABackend()
_BY_DEVICE = {CPUDevice: CPU, CUDADevice: CUDA}


def of(device):
    """The device's Backend, or None for a device the engine does not compile for."""
    return _BY_DEVICE.get(type(device))
