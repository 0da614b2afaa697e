"""Kernel IR in, object code out: the part of the JIT that needs no Python state,
run in this process or in a compile worker.  A job (`Job`) names its renderer
(needle.codegen.llvm, which turns kernel IR into LLVM IR text) and carries the
kernel, so rendering, the slower half of a cold compile in Python, runs in the
workers in parallel too.

This file is also the worker (see compile_pool): run on its own it reads jobs
from stdin and writes object code to stdout.  It imports llvmlite and the standard
library, and the renderer's modules without needle's package `__init__` (the code
generators import nothing of needle outside needle.codegen), so a worker starts
fast.

Optimization levels (LEVELS), named in the kernel cache key:
- "O2": LLVM's O2 pipeline with vectorization, unrolling and interleaving: the
  default.  Hot kernels (matmul, conv, reductions, softmax, elementwise at 2^20)
  ran within 1% of O3, while O3's aggressive full unrolling of nests of short
  constant loops made one 3x3x28 copy 64 KB of code and 2.6 s of compile (O2: 0.08 s);
- "O3": the same with O3's thresholds (config.OPT_LEVEL);
- "O2-nounroll": no unrolling or interleaving, for kernels with little work.
"""
from __future__ import annotations

import importlib
import os
import pickle
import struct
import sys
import types
from typing import NamedTuple, Optional

import llvmlite.binding as llvm

LEVELS = {"O3": (3, True), "O2": (2, True), "O2-nounroll": (2, False)}  # name -> (speed level, unroll)
_machines = {}  # (cpu, features) -> target machine for optimization and emission


def new_machine(cpu: str, features: str):
    """A target machine of this process's triple for `cpu` and `features` (an MCJIT
    engine takes ownership of the one it is given)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(cpu=cpu, features=features, opt=3, jit=True)


def _machine(cpu: str, features: str):
    tm = _machines.get((cpu, features))
    if tm is None:
        tm = _machines[(cpu, features)] = new_machine(cpu, features)
    return tm


def optimize(text: str, cpu: str, features: str, level: str):
    """The module of `text` after `level`'s pass pipeline (ValueError if it does not verify)."""
    tm = _machine(cpu, features)
    try:
        mod = llvm.parse_assembly(text)
        mod.triple = llvm.get_process_triple()
        mod.data_layout = str(tm.target_data)
        mod.verify()
    except RuntimeError as e:
        raise ValueError(f"generated LLVM IR does not verify: {e}") from None
    for fn in mod.functions:
        # A kernel's thread wrapper calls its entry point once per thread: inlined,
        # the loop nest would be optimized and emitted twice (25% more compile time).
        if not fn.is_declaration and fn.linkage == llvm.Linkage.external:
            fn.add_function_attribute("noinline")
    speed, unroll = LEVELS[level]
    pto = llvm.create_pipeline_tuning_options(speed_level=speed)
    pto.loop_vectorization = pto.slp_vectorization = True
    pto.loop_unrolling = pto.loop_interleaving = unroll
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


def compile_ir(text: str, cpu: str, features: str, level: str) -> bytes:
    """Relocatable object code (ELF) of the LLVM IR `text` for the given CPU."""
    return _machine(cpu, features).emit_object(optimize(text, cpu, features, level))


class Job(NamedTuple):
    """One kernel to compile with `level`'s pipeline for `cpu` and `features`: its
    LLVM IR `text`, or (when None) what renders it: the module named `renderer`
    renders `kernel` with `symbol`, `bounds_check` and `vector_bytes`."""
    cpu: str
    features: str
    level: str
    text: Optional[str] = None
    renderer: str = ""
    kernel: object = None
    symbol: str = ""
    bounds_check: bool = False
    vector_bytes: int = 0

    def render(self) -> str:
        if self.text is not None:
            return self.text
        return importlib.import_module(self.renderer).render(
            self.kernel, self.symbol, bounds_check=self.bounds_check, vector_bytes=self.vector_bytes)


def compile_job(job: Job) -> bytes:
    return compile_ir(job.render(), job.cpu, job.features, job.level)


def _package_without_init() -> None:
    """Make needle's modules importable in a worker without running the package's
    `__init__` (which would import all of needle and start its runtime): an empty
    package module over the same folder."""
    folder = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    name = os.path.basename(folder)
    if name not in sys.modules:
        package = types.ModuleType(name)
        package.__path__ = [folder]
        sys.modules[name] = package


# ---- the worker: length-prefixed pickles over stdin/stdout ---------------------------------
def write_message(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def read_message(stream):
    """The next message, or None at end of stream."""
    head = stream.read(8)
    if len(head) < 8:
        return None
    (size,) = struct.unpack("<Q", head)
    data = stream.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)


def serve(inp, out) -> None:
    """Answer each Job with (True, object code) or (False, error message) until the
    parent closes stdin."""
    _package_without_init()  # (before the first job's kernel is unpickled)
    while True:
        try:
            job = read_message(inp)
        except Exception as e:  # (a job that does not unpickle here: reported as its compile's failure)
            write_message(out, (False, f"{type(e).__name__}: {e}"))
            continue
        if job is None:
            return
        try:
            reply = (True, compile_job(job))
        except Exception as e:  # reported to the parent, which raises CompileError
            reply = (False, f"{type(e).__name__}: {e}")
        write_message(out, reply)


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
