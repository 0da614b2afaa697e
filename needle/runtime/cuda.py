"""CUDA device runtime through PyCUDA (imported lazily: needle runs without it)."""
from ..errors import DeviceError


def available():
    """(True, "") when PyCUDA, a driver and a GPU are all present, else (False, reason)."""
    try:
        import pycuda  # noqa: F401
    except ImportError:
        return False, "PyCUDA is not installed (pip install 'needle[cuda]')"
    try:
        import pycuda.driver as drv
    except ImportError as e:
        return False, f"no NVIDIA driver: PyCUDA could not load libcuda ({e})"
    try:
        drv.init()
        if drv.Device.count() == 0:
            return False, "no NVIDIA GPU found by the driver"
    except Exception as e:  # pycuda.driver.Error and friends
        return False, f"no usable NVIDIA GPU: {e}"
    return True, ""


def backend():
    ok, why = available()
    if not ok:
        raise DeviceError(f"cuda() is not available: {why}")
    raise DeviceError("cuda(): the CUDA runtime is not built yet")
