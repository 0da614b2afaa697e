"""pycuda.driver, the part needle uses, over cuda.bindings.driver."""
from __future__ import annotations

import ctypes
import types

import numpy as np

try:
    from cuda.bindings import driver as cu
except ImportError:  # cuda-python before 12.6
    from cuda import cuda as cu


class Error(Exception):
    pass


class LogicError(Error):
    pass


class MemoryError(Error):  # noqa: A001 - PyCUDA's name
    pass


def _check(result):
    err = result[0]
    if err != cu.CUresult.CUDA_SUCCESS:
        name = cu.cuGetErrorName(err)[1]
        text = name.decode() if isinstance(name, bytes) else str(err)
        if err == cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
            raise MemoryError(text)
        raise Error(text)
    return result[1] if len(result) == 2 else result[1:] or None


def init(flags=0):
    _check(cu.cuInit(flags))


device_attribute = types.SimpleNamespace(
    MULTIPROCESSOR_COUNT=cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)


class Device:
    def __init__(self, ordinal=0):
        self.handle = _check(cu.cuDeviceGet(ordinal))

    @staticmethod
    def count():
        return _check(cu.cuDeviceGetCount())

    def get_attribute(self, attribute):
        return _check(cu.cuDeviceGetAttribute(attribute, self.handle))

    def compute_capability(self):
        a = cu.CUdevice_attribute
        return (self.get_attribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                self.get_attribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))

    def name(self):
        raw = _check(cu.cuDeviceGetName(256, self.handle))
        return raw.split(b"\0")[0].decode()

    def make_context(self):
        return Context(self)


class Context:
    def __init__(self, device):
        self.device = device
        self.handle = _check(cu.cuDevicePrimaryCtxRetain(device.handle))
        _check(cu.cuCtxSetCurrent(self.handle))

    def get_device(self):
        return self.device

    def pop(self):
        pass

    @staticmethod
    def synchronize():
        _check(cu.cuCtxSynchronize())


class DeviceAllocation:
    def __init__(self, nbytes):
        self.ptr = int(_check(cu.cuMemAlloc(int(nbytes))))

    def __int__(self):
        return self.ptr

    __index__ = __int__

    def free(self):
        if self.ptr:
            cu.cuMemFree(self.ptr)
            self.ptr = 0

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass


def mem_alloc(nbytes):
    return DeviceAllocation(nbytes)


def memcpy_htod(dst, src):
    src = np.ascontiguousarray(src)
    _check(cu.cuMemcpyHtoD(int(dst), src.ctypes.data, src.nbytes))


def memcpy_dtoh(dst, src):
    _check(cu.cuMemcpyDtoH(dst.ctypes.data, int(src), dst.nbytes))


def memcpy_dtod(dst, src, nbytes):
    _check(cu.cuMemcpyDtoD(int(dst), int(src), int(nbytes)))


_CTYPES = {"P": ctypes.c_void_p, "q": ctypes.c_longlong, "Q": ctypes.c_ulonglong, "i": ctypes.c_int,
           "I": ctypes.c_uint, "d": ctypes.c_double, "f": ctypes.c_float}


class Function:
    def __init__(self, handle):
        self.handle, self.format = handle, ""

    def prepare(self, arg_format):
        self.format = arg_format
        return self

    def prepared_call(self, grid, block, *args):
        values = [_CTYPES[f](int(a) if f in "PqQiI" else float(a)) for f, a in zip(self.format, args)]
        pointers = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values])
        grid = tuple(grid) + (1,) * (3 - len(grid))
        block = tuple(block) + (1,) * (3 - len(block))
        _check(cu.cuLaunchKernel(self.handle, *grid, *block, 0, 0, ctypes.addressof(pointers), 0))


class Module:
    def __init__(self, handle):
        self.handle = handle

    def get_function(self, name):
        return Function(_check(cu.cuModuleGetFunction(self.handle, name.encode())))


def module_from_buffer(image):
    return Module(_check(cu.cuModuleLoadData(bytes(image))))


class Event:
    def __init__(self, flags=0):
        self.handle = _check(cu.cuEventCreate(flags))

    def record(self, stream=None):
        _check(cu.cuEventRecord(self.handle, 0))
        return self

    def synchronize(self):
        _check(cu.cuEventSynchronize(self.handle))
        return self

    def time_till(self, end):
        return _check(cu.cuEventElapsedTime(self.handle, end.handle))
