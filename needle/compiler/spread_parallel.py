"""A CPU kernel's short parallel loop merged with the loop inside it, so threads
split the work evenly."""
from __future__ import annotations

from ..codegen import kernel_ir as K
from .loop_collapse import plain_loop

#: a parallel loop of fewer iterations than this takes the loop inside it along
#: (spread_parallel)
MIN_PARALLEL_EXTENT = 16


def spread_parallel(kernel: K.Kernel) -> K.Kernel:
    """A CPU kernel whose parallel loop has few iterations around a loop nest (a conv
    weight's 3 x 3 taps over its channels; a padded view keeps them apart) runs both
    outer loops as one parallel loop, each variable unravelled from it, so that threads
    split it evenly: over 3 iterations two threads took 2 and 1 (the busier one twice
    the other's time), over 9 they take 5 and 4.  The loops inside (vectorized) stay."""
    outer = kernel.body[0] if kernel.parallel is not None and len(kernel.body) == 1 else None
    if not (isinstance(outer, K.Loop) and outer.kind == "parallel" and outer.start == 0
            and isinstance(outer.extent, int) and outer.extent < MIN_PARALLEL_EXTENT and len(outer.body) == 1):
        return kernel
    inner = outer.body[0]
    if not (plain_loop(inner) and inner.extent > 1 and any(isinstance(s, K.Loop) for s in inner.body)):
        return kernel
    var, extent = f"{outer.var}{inner.var}", outer.extent * inner.extent
    unravel = [K.Let(outer.var, K.idiv(K.Var(var), inner.extent)), K.Let(inner.var, K.imod(K.Var(var), inner.extent))]
    kernel.body, kernel.parallel = [K.Loop(var, extent, unravel + inner.body, "parallel")], (var, extent)
    return kernel
