"""needle's composition root: the one place where the few calls that must go up
the layers are plugged in.

Storage runs eager primitives without knowing the IR (the `EagerKernels` port of
backend_ndarray.devices), the CUDA device reaches its memory through the runtime
(`CUDAStorage`), an NDArray made without a device gets the CPU, the IR's builders
make lazy nodes (`ir.build.NODE_TYPE`), an IR node asks the engine to compute it
(`ir.lazy.REALIZE`), a capture stamps the user's lines through the profiler
(`engine.capture.STAMP_SOURCES`), and `needle.ir.graph`/`dump`/`visualize`, the public
names of needle.inspect's faces (which sit above the engine), are given to `needle.ir`.
Each port is declared where it is called; `wire()` fills them all, once, when
`import needle` runs, so no module changes another by being imported.
"""
from __future__ import annotations

from . import inspect, ir
from .backend_ndarray import devices, ndarray
from .engine import capture, eager, realize
from .ir import build, lazy
from .profiler import sources
from .runtime import cuda


def wire() -> None:
    devices.CompiledDevice.eager = eager
    devices.CUDADevice.runtime = cuda
    ndarray.DEFAULT_DEVICE = devices.cpu()      # an NDArray made without a device
    build.NODE_TYPE = lazy.LazyArray            # the nodes the IR's builders make
    lazy.REALIZE = realize.realize_nodes
    capture.STAMP_SOURCES = sources.stamping    # a capture stamps the user's lines
    ir.graph, ir.dump, ir.visualize = inspect.graph, inspect.dump, inspect.visualize  # (public names)
