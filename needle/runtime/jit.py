"""LLVM JIT for the CPU: kernels optimized at O3 for the host and emitted as object
code (which is also what the disk cache stores), loaded into MCJIT engines of up to
KERNELS_PER_ENGINE kernels each; MCJIT frees code only with its engine, so engines
die with the last cached kernel or schedule that uses them (the caches are bounded).

The cache key hashes the kernel IR text with everything that changes the code:
needle's, llvmlite's and LLVM's versions, the target triple, CPU name and
features, the optimization level and bounds checking — never debug flags.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import os
import threading
import time

import llvmlite
import llvmlite.binding as llvm

from .. import config
from ..errors import CompileError
from ..target import Target
from . import counters
from . import disk_cache
from .lru import LRUCache

OPT_LEVEL = 3
_lock = threading.RLock()
_state = {}


def _init():
    """Target machines and the engine, created once (under the lock: two threads
    using the JIT for the first time must not build two engines)."""
    if _state:
        return _state
    with _lock:
        if not _state:
            _state.update(_build_state())
    return _state


def _build_state() -> dict:
    state = {}
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    # idle GOMP workers spin this long before sleeping: long enough for back-to-back
    # kernels, short enough not to fight other processes (or numpy's BLAS) for the cores
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")
    gomp = ctypes.util.find_library("gomp") or "libgomp.so.1"
    try:
        llvm.load_library_permanently(gomp)
        state["gomp"] = ctypes.CDLL(gomp)
    except (OSError, RuntimeError):
        state["gomp"] = None
    state["triple"] = llvm.get_process_triple()
    state["cpu"], state["features"] = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    state["llvm_target"] = llvm.Target.from_triple(state["triple"])
    state["versions"] = f"needle-kernels-1|llvmlite-{llvmlite.__version__}|llvm-{llvm.llvm_version_info}"
    state["machines"] = {}  # (cpu, features) -> per-target state: machine, current engine
    pto = llvm.create_pipeline_tuning_options(speed_level=OPT_LEVEL)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pto.loop_interleaving = True
    state["pto"] = pto
    return state


def gomp():
    """libgomp as a ctypes library (None when it is missing)."""
    return _init()["gomp"]


def host_target(threads: int, bounds_check: bool) -> Target:
    """The host CPU as a Target: its LLVM CPU name, features and SIMD width."""
    s = _init()
    features = s["features"]
    width = 64 if "+avx512f" in features else 32 if "+avx2" in features or "+avx," in features else 16
    return Target("cpu", width, threads, bounds_check, s["cpu"], features)


def _machine(target: Target) -> dict:
    """The LLVM target machine (optimization, object emission) and the current
    MCJIT engine for `target`'s CPU and features."""
    s = _init()
    key = (target.cpu, target.features)
    found = s["machines"].get(key)
    if found is None:
        def machine():
            return s["llvm_target"].create_target_machine(cpu=target.cpu, features=target.features,
                                                          opt=OPT_LEVEL, jit=True)
        found = s["machines"][key] = {"tm": machine(), "machine": machine, "engine": None, "engine_kernels": 0}
    return found


class CompiledKernel:
    """A kernel ready to launch: the entry point and the GOMP wrapper.  It keeps the
    engine holding its machine code alive; the code is freed with the engine once
    no cached kernel or schedule refers to it."""

    __slots__ = ("name", "symbol", "address", "omp_address", "cfunc", "kernel", "key", "engine", "nbytes")

    def __init__(self, kernel, symbol, address, omp_address, key, engine, nbytes):
        self.kernel, self.name, self.symbol, self.key = kernel, kernel.name, symbol, key
        self.address, self.omp_address, self.engine, self.nbytes = address, omp_address, engine, nbytes
        self.cfunc = KERNEL_CFUNC(address)


KERNEL_CFUNC = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                ctypes.c_void_p, ctypes.c_void_p)

#: compiled kernels by key, bounded (config.KERNEL_CACHE_SIZE / KERNEL_CACHE_BYTES)
_compiled = LRUCache("kernel", lambda: (config.KERNEL_CACHE_SIZE, config.KERNEL_CACHE_BYTES),
                     lambda k: k.nbytes + ENGINE_BYTES // KERNELS_PER_ENGINE)

#: kernels loaded into one MCJIT engine before a new one is started.  MCJIT frees
#: machine code only with its engine, so a process that meets ever new kernels
#: needs engines that can die; an engine costs about this many bytes by itself.
KERNELS_PER_ENGINE = 64
ENGINE_BYTES = 128 << 10


def kernel_key(kernel, target: Target, renderer) -> str:
    s = _init()
    material = "\n".join([s["versions"], renderer.fingerprint(), s["triple"], target.cpu, target.features,
                          f"O{OPT_LEVEL}", f"bounds={int(target.bounds_check)}", kernel.text()])
    return hashlib.sha256(material.encode()).hexdigest()


def compile_kernels(kernels, target: Target, renderer) -> list:
    """Each kernel compiled for `target`: from the memory cache, else from the disk
    cache or LLVM, loaded into the target's current engine together.  `renderer`
    (needle.codegen.llvm) turns kernel IR into LLVM IR: `render(kernel, symbol,
    bounds_check)` and `fingerprint()`, a hash of its own code for the cache key."""
    keys = [kernel_key(k, target, renderer) for k in kernels]
    out = [_compiled.get(key) for key in keys]
    if all(c is not None for c in out):
        counters.add("cache_hits", len(out))
        return out
    with _lock:
        done = {}  # a kernel twice in one schedule is loaded once, even if the cache is tiny
        for i, (kernel, key) in enumerate(zip(kernels, keys)):
            if out[i] is None:
                out[i] = done.get(key) or _compiled.get(key) or _load(kernel, key, target, renderer)
            else:
                counters.add("cache_hits")
            done[key] = out[i]
    return out


def _load(kernel, key: str, target: Target, renderer) -> CompiledKernel:
    """Object code from the disk cache or LLVM, added to the current engine."""
    symbol = "k_" + key[:24]
    t0 = time.perf_counter()
    obj = disk_cache.load(key) if config.CACHE else None
    if obj is not None and not _looks_like_kernel(obj, symbol):
        disk_cache.discard(key)  # checksum fine but not our object code: never load it
        obj = None
    if obj is not None:
        counters.add("cache_hits")
        counters.add("disk_cache_hits")
    else:
        obj = _codegen(kernel, symbol, target, renderer)
        counters.add("kernels_compiled")
        if config.CACHE:
            disk_cache.store(key, obj)
    engine = _current_engine(target)
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    address = engine.get_function_address(symbol)
    omp_address = engine.get_function_address(symbol + "_omp")
    if not address:
        raise CompileError(f"kernel {kernel.name}: symbol {symbol} missing after loading its object code")
    counters.add("compile_seconds", time.perf_counter() - t0)
    compiled = CompiledKernel(kernel, symbol, address, omp_address, key, engine, len(obj))
    _compiled.put(key, compiled)
    return compiled


def _current_engine(target: Target):
    """The engine new kernels go into (a fresh one every KERNELS_PER_ENGINE kernels)."""
    s = _machine(target)
    if s["engine"] is None or s["engine_kernels"] >= KERNELS_PER_ENGINE:
        s["engine"] = llvm.create_mcjit_compiler(llvm.parse_assembly(""), s["machine"]())  # owns its machine
        s["engine_kernels"] = 0
    s["engine_kernels"] += 1
    return s["engine"]


def _looks_like_kernel(obj: bytes, symbol: str) -> bool:
    """An ELF object that defines this kernel's entry point (a cheap sanity check
    on top of the cache's checksum, before handing bytes to the JIT linker)."""
    return obj[:4] == b"\x7fELF" and (symbol + "_omp").encode() in obj


def llvm_ir(kernel, target: Target, renderer, optimized: bool = False) -> str:
    """The LLVM IR text of a kernel for `target` (before or after the O3 pipeline)."""
    key = kernel_key(kernel, target, renderer)
    module = renderer.render(kernel, "k_" + key[:24], bounds_check=target.bounds_check)
    if not optimized:
        return str(module)
    return str(_optimize(str(module), target))


def _optimize(text: str, target: Target):
    s, tm = _init(), _machine(target)["tm"]
    try:
        mod = llvm.parse_assembly(text)
        mod.triple = s["triple"]
        mod.data_layout = str(tm.target_data)
        mod.verify()
    except RuntimeError as e:
        raise CompileError(f"generated LLVM IR does not verify: {e}") from None
    pb = llvm.create_pass_builder(tm, s["pto"])
    pb.getModulePassManager().run(mod, pb)
    return mod


def _codegen(kernel, symbol: str, target: Target, renderer) -> bytes:
    module = renderer.render(kernel, symbol, bounds_check=target.bounds_check)
    mod = _optimize(str(module), target)
    return _machine(target)["tm"].emit_object(mod)
