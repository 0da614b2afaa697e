"""LLVM JIT for the CPU: kernels optimized for the host and emitted as object code
(which is also what the disk cache stores), loaded into MCJIT engines of up to
KERNELS_PER_ENGINE kernels each; MCJIT frees code only with its engine, so engines
die with the last cached kernel or schedule that uses them (the caches are bounded).

A schedule's missing kernels are rendered here, one after another, while compile
worker processes (compile_pool) optimize and emit the ones already rendered.
Small kernels are compiled without loop unrolling (`level_for`).

The cache key hashes the kernel IR text with everything that changes the code:
needle's, llvmlite's and LLVM's versions, the target triple, CPU name and
features, the optimization level and bounds checking — never debug flags.
"""
from __future__ import annotations

import copy
import ctypes
import ctypes.util
import hashlib
import threading
import time
import types

import llvmlite
import llvmlite.binding as llvm

from .. import config
from ..errors import CompileError
from ..target import Target
from . import counters
from . import compile_pool, disk_cache, llvm_compile
from .lru import LRUCache

#: needle's package name: a renderer among its modules is imported by the compile workers
_PACKAGE = __name__.split(".")[0]

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
    # GOMP_SPINCOUNT is left to libgomp (and to the user): its default spins an idle
    # worker for a few ms, as in torch: a worker that has slept is slow to wake, and a
    # shorter spin makes every threaded kernel after a little Python wait for it.  On a
    # busy machine the team shrinks instead (team.py, docs/configuration.md)
    gomp = ctypes.util.find_library("gomp") or "libgomp.so.1"
    try:
        llvm.load_library_permanently(gomp)
        state["gomp"] = ctypes.CDLL(gomp)
    except (OSError, RuntimeError):
        state["gomp"] = None
    state["triple"] = llvm.get_process_triple()
    state["cpu"], state["features"] = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    state["versions"] = f"needle-kernels-1|llvmlite-{llvmlite.__version__}|llvm-{llvm.llvm_version_info}"
    state["machines"] = {}  # (cpu, features) -> per-target state: current engine
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
    """The current MCJIT engine for `target`'s CPU and features (and a maker of
    target machines: an engine owns the one it is given)."""
    s = _init()
    key = (target.cpu, target.features)
    found = s["machines"].get(key)
    if found is None:
        found = s["machines"][key] = {"machine": lambda: llvm_compile.new_machine(*key), "engine": None,
                                      "engine_kernels": 0}
    return found


def level_for(kernel) -> str:
    """The optimization level of a kernel (llvm_compile.LEVELS): config.OPT_LEVEL,
    or "O2-nounroll" for kernels the compiler did not mark hot (fewer elements than
    the target's unroll_min_work: their run time is mostly launch overhead, and
    unrolling their loops costs compile time and buys little), unless an innermost
    loop runs a few constant trips (a reduction over short rows), which unrolling
    speeds up severalfold."""
    if kernel.hot or kernel.has_short_loop():
        return config.OPT_LEVEL
    return "O2-nounroll"


class CompiledKernel:
    """A kernel ready to launch: the entry point and the GOMP wrapper.  It keeps the
    engine holding its machine code alive; the code is freed with the engine once
    no cached kernel or schedule refers to it."""

    __slots__ = ("name", "symbol", "address", "omp_address", "cfunc", "kernel", "key", "engine", "nbytes")

    def __init__(self, kernel, symbol, address, omp_address, key, engine, nbytes):
        self.kernel, self.name, self.symbol, self.key = kernel, kernel.name, symbol, key
        self.address, self.omp_address, self.engine, self.nbytes = address, omp_address, engine, nbytes
        self.cfunc = KERNEL_CFUNC(address)

    def named_for(self, kernel) -> "CompiledKernel":
        """This code under `kernel`'s name: kernels that differ only in their parallel
        extent share a key (Kernel.code_text), and errors should name the right one."""
        if kernel.name == self.name:
            return self
        twin = copy.copy(self)
        twin.kernel, twin.name = kernel, kernel.name
        return twin


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
                          level_for(kernel), f"bounds={int(target.bounds_check)}", kernel.code_text()])
    return hashlib.sha256(material.encode()).hexdigest()


def _symbol(key: str) -> str:
    return "k_" + key[:24]


def compile_kernels(kernels, target: Target, renderer) -> list:
    """Each kernel compiled for `target`: from the memory cache, else from the disk
    cache or LLVM, loaded into the target's current engine together.  `renderer`
    (needle.codegen.llvm) turns kernel IR into LLVM IR text: `render(kernel, symbol,
    bounds_check, vector_bytes)` and `fingerprint()`, a hash of its own code for the cache key."""
    keys = [kernel_key(k, target, renderer) for k in kernels]
    out = [_compiled.get(key) for key in keys]
    if all(c is not None for c in out):
        counters.add("cache_hits", len(out))
        return [c.named_for(k) for c, k in zip(out, kernels)]
    with _lock:
        t0 = time.perf_counter()
        objects, missing = {}, []  # object code by key; (kernel, key) found nowhere
        for kernel, key, found in zip(kernels, keys, out):
            if found is None and key not in objects:
                objects[key] = _from_disk(key)
                if objects[key] is None:
                    missing.append((kernel, key))
        for (kernel, key), obj in zip(missing, _compile(missing, target, renderer)):
            objects[key] = obj
        done = {}  # a kernel twice in one schedule is loaded once, even if the cache is tiny
        for i, (kernel, key) in enumerate(zip(kernels, keys)):
            if out[i] is None:
                out[i] = done.get(key) or _compiled.get(key) or _load(kernel, key, objects[key], target)
            else:
                counters.add("cache_hits")
            done[key] = out[i]
        counters.add("compile_seconds", time.perf_counter() - t0)
    return [c.named_for(k) for c, k in zip(out, kernels)]


def _from_disk(key: str):
    """Object code from the disk cache, or None."""
    obj = disk_cache.load(key) if config.CACHE else None
    if obj is not None and not _looks_like_kernel(obj, _symbol(key)):
        disk_cache.discard(key)  # checksum fine but not our object code: never load it
        obj = None
    if obj is not None:
        counters.add("cache_hits")
        counters.add("disk_cache_hits")
    return obj


def _compile(missing, target: Target, renderer) -> list:
    """Object code of each (kernel, key) in `missing`, stored in the disk cache.
    Two or more kernels go to the compile workers (config.COMPILE_WORKERS)."""
    # a renderer among needle's modules renders in the workers; any other (a test's) here
    in_workers = isinstance(renderer, types.ModuleType) and renderer.__name__.split(".")[0] == _PACKAGE

    def jobs():
        for kernel, key in missing:
            level = level_for(kernel)
            if in_workers:
                yield llvm_compile.Job(target.cpu, target.features, level, renderer=renderer.__name__, kernel=kernel,
                                       symbol=_symbol(key), bounds_check=target.bounds_check,
                                       vector_bytes=target.vector_bytes)
            else:
                yield llvm_compile.Job(target.cpu, target.features, level, text=_render(kernel, key, target, renderer))

    workers = min(config.COMPILE_WORKERS, len(missing))
    if len(missing) >= 2 and workers >= 1:
        results = compile_pool.compile_all(jobs(), workers)
    else:
        results = [_compile_here(job) for job in jobs()]
    objects = []
    for (kernel, key), (ok, payload) in zip(missing, results):
        if not ok:
            raise CompileError(f"kernel {kernel.name}: {payload}")
        counters.add("kernels_compiled")
        if config.CACHE:
            disk_cache.store(key, payload)
        objects.append(payload)
    return objects


def _render(kernel, key: str, target: Target, renderer) -> str:
    return renderer.render(kernel, _symbol(key), bounds_check=target.bounds_check, vector_bytes=target.vector_bytes)


def _compile_here(job):
    with _lock:  # the in-process target machines are not shared between threads
        try:
            return True, llvm_compile.compile_job(job)
        except ValueError as e:
            return False, str(e)


def _load(kernel, key: str, obj: bytes, target: Target) -> CompiledKernel:
    """Object code added to the current engine."""
    symbol = _symbol(key)
    engine = _current_engine(target)
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    address = engine.get_function_address(symbol)
    omp_address = engine.get_function_address(symbol + "_omp")
    if not address:
        raise CompileError(f"kernel {kernel.name}: symbol {symbol} missing after loading its object code")
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
    """The LLVM IR text of a kernel for `target` (before or after its pass pipeline)."""
    text = _render(kernel, kernel_key(kernel, target, renderer), target, renderer)
    if not optimized:
        return text
    with _lock:
        try:
            return str(llvm_compile.optimize(text, target.cpu, target.features, level_for(kernel)))
        except ValueError as e:
            raise CompileError(str(e)) from None
