"""Run generated CUDA C on the CPU: the .cu text after `shim.h`, compiled as C++20
into a shared library, each kernel called through a generated launcher that runs
the grid block by block with one fiber per CUDA thread (see shim.h).

Libraries are cached by the hash of what goes into them under the temp dir, so a
second test run (or a second test asking for the same kernels) does not rebuild.
`run_schedule` executes a whole needle Schedule the way the CUDA runtime does
(slots for leaves, outputs and temps; one launch per call), with the grid capped
to a few blocks so grid-stride loops iterate, bounds checking on, and outputs
and temps filled with garbage first so an element never written shows.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SHIM = os.path.join(HERE, "shim.h")
CACHE_DIR = os.path.join(tempfile.gettempdir(), "needle-cuda-emulation")
FLAGS = ["-std=c++20", "-O1", "-shared", "-fPIC", "-w", "-U_FORTIFY_SOURCE"]

_SIGNATURE = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(([^)]*)\)')
_libs = {}


def have_compiler() -> bool:
    return shutil.which("g++") is not None


def parse_kernels(source: str) -> list:
    """(name, [C type of each argument]) of every kernel in the source."""
    out = []
    for name, args in _SIGNATURE.findall(source):
        types = []
        for arg in args.split(","):
            words = arg.replace("__restrict__", "").split()
            types.append(" ".join(words[:-1]))
        out.append((name, types))
    return out


def launchers(source: str) -> str:
    """`int emu_<name>(void** args, grid, block, policy)` for every kernel: args[i] is
    the pointer itself for pointer arguments, a pointer to the value for scalars."""
    text = []
    for name, types in parse_kernels(source):
        casts = [f"({t})args[{i}]" if t.endswith("*") else f"*({t}*)args[{i}]" for i, t in enumerate(types)]
        text.append(f'extern "C" int emu_{name}(void** args, unsigned grid, unsigned block, int policy) {{\n'
                    f"  return nd_emu::launch([&] {{ {name}({', '.join(casts)}); }}, grid, block, policy);\n}}")
    return "\n".join(text)


def build(source: str) -> str:
    """Path of the shared library for `source` (built once, cached by content)."""
    with open(SHIM) as f:
        shim = f.read()
    unit = shim + "\n" + source + "\n" + launchers(source) + "\n"
    key = hashlib.sha256(("\0".join(FLAGS) + "\0" + unit).encode()).hexdigest()[:24]
    path = os.path.join(CACHE_DIR, f"emu-{key}.so")
    if os.path.exists(path):
        return path
    os.makedirs(CACHE_DIR, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE_DIR) as tmp:
        cpp = os.path.join(tmp, "unit.cpp")
        with open(cpp, "w") as f:
            f.write(unit)
        out = os.path.join(tmp, "unit.so")
        proc = subprocess.run(["g++", *FLAGS, "-o", out, cpp], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"emulation build failed:\n{proc.stderr[-6000:]}")
        os.replace(out, path)
    return path


class Module:
    """A built library; `launch(name, args, grid, block)` runs one kernel."""

    def __init__(self, source: str):
        path = build(source)
        self.lib = _libs.get(path) or _libs.setdefault(path, ctypes.CDLL(path))
        self.signatures = dict(parse_kernels(source))

    def launch(self, name: str, args: list, grid: int, block: int, policy: int = 0) -> None:
        """`args`: ints (pointers) or ctypes scalars, in the kernel's order; block b runs
        under scheduling policy (b + policy) % 4 (see shim.h)."""
        keep, slots = [], (ctypes.c_void_p * max(1, len(args)))()
        for i, a in enumerate(args):
            if isinstance(a, (int, np.integer)) or a is None:
                slots[i] = int(a or 0)
            else:
                keep.append(a)
                slots[i] = ctypes.addressof(a)
        fn = getattr(self.lib, "emu_" + name)
        fn.restype = ctypes.c_int
        rc = fn(slots, ctypes.c_uint(grid), ctypes.c_uint(block), ctypes.c_int(policy))
        if rc == 1:
            raise AssertionError(f"kernel {name}: deadlock — a __syncthreads() or warp shuffle "
                                 "not reached by every thread")
        if rc != 0:
            raise AssertionError(f"kernel {name}: bad launch shape grid={grid} block={block}")


# ---- schedules -------------------------------------------------------------------------------------
def module_for(schedules, bounds_check: bool = True):
    """One library for the kernels of several schedules: (Module, names per schedule)."""
    from needle.codegen import cuda
    kernels, names = [], []
    for si, s in enumerate(schedules):
        names.append([f"s{si}_k{ci}_{c.kernel.name}" for ci, c in enumerate(s.calls)])
        kernels += [c.kernel for c in s.calls]
    flat = [n for ns in names for n in ns]
    return Module(cuda.render_module(kernels, flat, bounds_check=bounds_check)), names


def _garbage(nbytes: int, dtype) -> np.ndarray:
    buf = np.full(max(nbytes, 1), 0xFF, dtype=np.uint8)
    return buf


def run_schedule(module: Module, names, schedule, leaves, scalars, bounds_check: bool = True,
                 grid_cap: int = 3, policy: int = 0) -> list:
    """Execute `schedule` in emulation; the outputs as numpy arrays."""
    from needle.dtypes import itemsize, np_dtype
    ptrs, limits = {}, {}
    for i, leaf in enumerate(leaves):
        h = leaf._handle
        ptrs[i] = h.ctypes.data + leaf.offset * h.itemsize
        limits[i] = (-leaf.offset, h.size - leaf.offset)
    outputs, arrays = [], {}
    for slot, shape, dtype in schedule.outputs:
        if slot not in arrays:
            size = int(np.prod(shape))
            raw = _garbage(max(size, 1) * itemsize(dtype), dtype)
            if dtype in ("float32", "float64"):
                raw.view(np_dtype(dtype))[:] = np.nan
            else:
                raw[:] = 0x5A
            arrays[slot] = raw.view(np_dtype(dtype))
            ptrs[slot] = arrays[slot].ctypes.data
            limits[slot] = (0, size)
        outputs.append(arrays[slot][:int(np.prod(shape))].reshape(shape))
    temps = [_garbage(n, None) for n in schedule.temp_bytes]
    values = np.array([s.value for s in scalars] or [0.0], dtype=np.float64)
    for call, name in zip(schedule.calls, names):
        k = call.kernel
        args = []
        for slot, buf, shift in zip(call.slots, k.bufs, call.byte_offsets()):
            kind = schedule.slot_kinds[slot]
            if kind[0] == "temp":
                t = temps[kind[1]]
                ptrs[slot] = t.ctypes.data
                limits[slot] = (0, t.size // itemsize(buf.dtype))
            args.append(ptrs[slot] + shift)  # (as runtime/cuda.py: the pointer moved by the offset)
        params = values[call.params] if call.params else np.zeros(1)
        args.append(params.ctypes.data)
        err = np.zeros(1, dtype=np.int32)
        if bounds_check:
            lim = np.array([v - shift for slot, shift in zip(call.slots, call.offsets) for v in limits[slot]]
                           or [0], dtype=np.int64)
            args += [lim.ctypes.data, err.ctypes.data]
        module.launch(name, args, min(k.grid, grid_cap), k.block, policy)
        if err[0]:
            raise AssertionError(f"kernel {name}: index out of bounds on buffer {k.bufs[err[0] - 1].name}")
    return [np.array(o) for o in outputs]
