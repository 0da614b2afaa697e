"""needle's composition root: the one place where the few calls that must go up
the layers are plugged in.

Storage runs eager primitives without knowing the IR (the `EagerKernels` port of
backend_ndarray.devices), the CUDA device reaches its memory through the runtime
(`CUDAStorage`), an IR node asks the engine to compute it (`ir.lazy.REALIZE`), and
`needle.ir.dump`'s later stages come from the engine and the autograd picture
(`ir.VIEWS`).  Each port is declared where it is called; `wire()` fills them all,
once, when `import needle` runs, so no module changes another by being imported.
"""
from __future__ import annotations

from . import autograd_graph, ir
from .backend_ndarray.devices import CompiledDevice, CUDADevice
from .engine import eager, realize, stages
from .ir import lazy
from .runtime import cuda


def wire() -> None:
    CompiledDevice.eager = eager
    CUDADevice.runtime = cuda
    lazy.REALIZE = realize.realize_nodes
    ir.register_view("compiler", stages)
    ir.register_view("autograd", autograd_graph)
