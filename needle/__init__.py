"""needle: a small deep-learning framework whose tensors are lazy by default and
whose pending graphs are compiled into fused kernels (LLVM on the CPU, CUDA C on
NVIDIA GPUs).  The API is the one of CMU's Deep Learning Systems course."""
from . import errors  # noqa: F401
from .wiring import wire

wire()  # (the ports lower layers call up through: needle/wiring.py)
from . import autograd, init, ops  # noqa: F401
from . import backend_ndarray  # noqa: F401
from . import backend_ndarray as nd  # noqa: F401
from .autograd import Tensor, TensorTuple, is_grad_enabled, no_grad  # noqa: F401
from .backend_selection import (BACKEND, Device, NDArray, all_devices, array_api, cpu, cpu_numpy,  # noqa: F401
                                cuda, default_device)
from .init import ones, ones_like, zeros, zeros_like  # noqa: F401
from .ops import *  # noqa: F401,F403
from .realize import lazy, realize  # noqa: F401
from .functions import arange, cat, concat, full, manual_seed, rand, randn, stack, where  # noqa: F401,E402
from .profiler import profile  # noqa: F401,E402
from . import autograd_graph, data, ir, nn, optim, runtime  # noqa: F401,E402
from .serialization import load, save  # noqa: F401,E402
from .captured.function import jit  # noqa: F401,E402
from . import config  # noqa: E402

if config.VIZ:  # NEEDLE_VIZ=1: record what this process compiles and runs, for `python -m needle viz`
    from . import viz
    viz.start_for_process()

__version__ = "0.1.0"
