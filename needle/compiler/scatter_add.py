"""scatter_add's kernel: indices may repeat, so each task owns a fiber of the output
(no two tasks add into one element) and no atomics are needed."""
from __future__ import annotations

from ..codegen import kernel_ir as K
from .loop_nests import linear, loop_vars, nest, nest_loops
from .views import View


def scatter_add(low) -> K.Kernel:
    """scatter_add, after its zero fill: one task per position outside the indexed
    axes adds every value whose index lands in its fiber of the output.  Tasks own
    disjoint fibers and the index loops stay serial inside a task, so repeated
    indices add up without races, on threads and on the GPU grid alike."""
    g = low.group
    values, indices = g.root.srcs[0], g.root.srcs[1:]
    axis, sizes = g.root.arg
    i_ndim, k = indices[0].ndim, len(indices)
    pre, ishape, post = values.shape[:axis], indices[0].shape, values.shape[axis + i_ndim:]
    pre_ix, pre_loops = loop_vars(pre, "p")
    post_ix, post_loops = loop_vars(post, "q")
    j_ix, j_loops = loop_vars(ishape, "j")
    out = low.buffer(low.slot_of(g.root), g.root.dtype, "out")
    strides = View.contiguous(g.root.shape).strides
    lets = [K.Let(f"t{d}", low.index_value(ix, j_ix, n)) for d, (ix, n) in enumerate(zip(indices, sizes))]
    at = linear(pre_ix + tuple(K.Var(f"t{d}") for d in range(k)) + post_ix, strides, 0)
    add = K.Store(out, at, K.Binary("add", K.Load(out, at, g.root.dtype),
                                    low.gen(values, pre_ix + j_ix + post_ix), g.root.dtype))
    body = nest_loops(j_loops, lets + [add])
    return low.kernel(*nest(pre_loops + post_loops, body), work=values.size)
