"""A stand-in for the part of PyCUDA that needle's CUDA runtime uses, whose "GPU" is
host memory and whose kernels run in the CPU emulator (harness.py), so the runtime
(`needle.runtime.cuda`: context, pool, copies, module cache, schedule execution,
setitem kernel, debug timing, bounds checks) is exercised without a GPU.

"Device pointers" are host addresses of numpy buffers; `compiler.compile` returns
the source itself as the "cubin" and `module_from_buffer` builds it with the
emulator.  The compute capability is (0, 0) so disk-cache keys never collide with
a real GPU's.  `install()` puts the modules into sys.modules; `uninstall()` takes
them out again.
"""
from __future__ import annotations

import ctypes
import sys
import types

import numpy as np

from . import harness

GRID_CAP = 4   # emulated blocks per launch (kernels are grid-stride: any grid is correct)
launches = []  # (name, grid, block) of every launch, for tests


class MemoryError_(Exception):
    pass


class DeviceAllocation:
    def __init__(self, nbytes: int):
        self.buf = np.full(nbytes, 0xCD, dtype=np.uint8)  # garbage, as cudaMalloc gives

    def __int__(self):
        return self.buf.ctypes.data

    def __index__(self):
        return self.buf.ctypes.data


class Function:
    def __init__(self, module, name):
        self.module, self.name, self.format = module, name, None

    def prepare(self, arg_format):
        self.format = arg_format
        return self

    def prepared_call(self, grid, block, *args):
        assert self.format is not None and len(self.format) == len(args), (self.format, args)
        converted = []
        for f, a in zip(self.format, args):
            if f == "P":
                converted.append(int(a))
            else:
                converted.append({"q": ctypes.c_longlong, "d": ctypes.c_double, "i": ctypes.c_int}[f](a))
        launches.append((self.name, grid[0], block[0]))
        self.module.launch(self.name, converted, min(grid[0], GRID_CAP), block[0], policy=len(launches) % 4)


class Module:
    def __init__(self, source: str):
        self.emulated = harness.Module(source)

    def get_function(self, name):
        if name not in self.emulated.signatures:
            raise LogicError_(f"cuModuleGetFunction failed: named symbol not found ({name})")
        return Function(self.emulated, name)


class LogicError_(Exception):
    pass


class Event:
    def record(self, stream=None):
        return self

    def synchronize(self):
        return self

    def time_till(self, other):
        return 0.001


class Device:
    def __init__(self, ordinal=0):
        self.ordinal = ordinal

    @staticmethod
    def count():
        return 1

    def compute_capability(self):
        return (0, 0)

    def get_attribute(self, attribute):
        return 1

    def name(self):
        return "Emulated GPU (needle test double)"

    def make_context(self):
        return Context(self)


class Context:
    def __init__(self, device):
        self.device = device

    def get_device(self):
        return self.device

    def pop(self):
        pass

    @staticmethod
    def synchronize():
        pass


def _addr(x):
    return int(x)


def _driver():
    drv = types.ModuleType("pycuda.driver")
    drv.init = lambda flags=0: None
    drv.Device = Device
    drv.Context = Context
    drv.Event = Event
    drv.MemoryError = MemoryError_
    drv.LogicError = LogicError_
    drv.device_attribute = types.SimpleNamespace(MULTIPROCESSOR_COUNT="MULTIPROCESSOR_COUNT")
    drv.mem_alloc = DeviceAllocation
    drv.memcpy_htod = lambda dst, src: ctypes.memmove(_addr(dst), np.ascontiguousarray(src).ctypes.data,
                                                      np.asarray(src).nbytes)
    drv.memcpy_dtoh = lambda dst, src: ctypes.memmove(dst.ctypes.data, _addr(src), dst.nbytes)
    drv.memcpy_dtod = lambda dst, src, n: ctypes.memmove(_addr(dst), _addr(src), n)
    drv.module_from_buffer = lambda data: Module(bytes(data).decode())
    return drv


def install() -> dict:
    """Put the fake pycuda into sys.modules; returns what it replaced."""
    names = ("pycuda", "pycuda.driver", "pycuda.compiler", "pycuda.tools")
    saved = {n: sys.modules.get(n) for n in names}
    root = types.ModuleType("pycuda")
    root.VERSION = (0, 0, 0)
    drv = _driver()
    compiler = types.ModuleType("pycuda.compiler")
    compiler.compile = lambda source, **kw: source.encode()
    tools = types.ModuleType("pycuda.tools")
    tools.make_default_context = lambda: Device(0).make_context()
    tools.clear_context_caches = lambda: None
    root.driver, root.compiler, root.tools = drv, compiler, tools
    sys.modules.update({"pycuda": root, "pycuda.driver": drv, "pycuda.compiler": compiler, "pycuda.tools": tools})
    return saved


def uninstall(saved: dict) -> None:
    for name, module in saved.items():
        if module is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = module
