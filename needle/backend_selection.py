"""Pick the array backend (NEEDLE_BACKEND=nd|np), as in the course framework.

`nd` (default): tensors hold `NDArray`s on `cpu()`, `cpu_numpy()` or `cuda()`.
`np`: tensors hold plain numpy arrays and run eagerly; devices still exist so code
that names them runs, but all of them compute with numpy.
"""
from . import config
from .errors import DeviceError

BACKEND = config.BACKEND
if BACKEND not in ("nd", "np"):
    raise DeviceError(f"NEEDLE_BACKEND={BACKEND!r}: expected 'nd' or 'np'")

from . import backend_ndarray as nd  # noqa: E402
from .backend_ndarray import (Device, all_devices, cpu, cpu_numpy, cuda,  # noqa: E402,F401
                              default_device)

if BACKEND == "nd":
    from .backend_ndarray import NDArray  # noqa: F401
    array_api = nd
else:
    import numpy as array_api  # noqa: F401
    NDArray = array_api.ndarray
