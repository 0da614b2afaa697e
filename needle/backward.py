"""Reverse-mode differentiation over the Tensor graph: `Tensor.backward` stores each
gradient in `.grad` (the course's `compute_gradient_of_variables`), `vjp` returns them as
Tensors built from ops (differentiable again); and the versions that keep both right
across index assignments (`t[i] = v` makes `t` a new node and keeps what earlier nodes
read).  autograd.py defines what a Tensor is and re-exports the course's names from here.
"""
from __future__ import annotations

from typing import List, Optional

from . import autograd, config
from .autograd import BACKEND, Tensor, Value, outlives_step, realize_values
from .engine import capture as _capture
from .errors import DTypeError, GraphError, ShapeError, fmt_shape
from .traversal import postorder


def compute_gradient_of_variables(output_tensor: Tensor, out_grad: Tensor) -> None:
    """Reverse-mode autodiff: store the gradient of `output_tensor` with respect to
    every node it depends on (that requires grad) in `node.grad`."""
    if output_tensor.shape != out_grad.shape:
        raise ShapeError(f"backward: out_grad shape {fmt_shape(out_grad.shape)} differs from "
                         f"the tensor's {fmt_shape(output_tensor.shape)}")
    outlives_step(output_tensor)  # the loss: computed with the next schedule (the step)
    # eager compiled mode: the pass is built as one graph and the leaves' gradients are
    # computed together when it ends, as the optimizer's update is (a kernel per op
    # had cost more to launch than to run; no one reads a value before the pass ends,
    # and an intermediate's .grad is computed if it is read).  The op-by-op pass stays
    # a setting: the tests' eager mode checks every gradient op's own kernels with it
    fused = BACKEND == "nd" and config.EAGER_FUSED_BACKWARD and not autograd.lazy_mode()
    if not fused:
        backward_pass(output_tensor, out_grad)
        return
    state = autograd._MODE.state  # (this thread's: another thread's ops stay eager meanwhile)
    previous, state.lazy = state.lazy, True
    try:
        grads = backward_pass(output_tensor, out_grad)
    finally:
        state.lazy = previous
    realize_values(grads)


def backward_pass(output_tensor: Tensor, out_grad: Tensor) -> list:
    """compute_gradient_of_variables' pass over the graph: the leaves' new gradients
    (the profiler finds the op being differentiated in this frame: profiler/sources.py)."""
    leaves = []
    node_to_output_grads_list = {output_tensor: [out_grad]}
    _read_versions_used([output_tensor])
    for node in reversed(find_topo_sort([output_tensor])):
        grads = node_to_output_grads_list.pop(node, None)
        if grads is None or not node.requires_grad:
            continue
        adjoint = sum_node_list(grads)
        if node.op is None:
            node.grad = adjoint
            if _capture.CURRENT is not None:
                _capture.grad_set(node)
            outlives_step(adjoint)  # computed with the next schedule, loss read or step
            leaves.append(adjoint)
            continue
        node.grad = _cut(adjoint)
        _check_versions(node)
        for i, (inp, grad) in enumerate(zip(node.inputs, node.op.gradient_as_tuple(adjoint, node))):
            if inp.requires_grad and grad is not None:
                _check_gradient(node, i, inp, grad)
                node_to_output_grads_list.setdefault(inp, []).append(grad)
    return leaves


def vjp(output: Value, cotangent: Value, inputs: List[Value]) -> List[Optional[Value]]:
    """The gradients of sum(output * cotangent) with respect to `inputs`, as Tensors
    built from ops (so differentiable again), by a reverse pass over the graph between
    them; no `.grad` is set.  For fused ops whose gradient is itself a fused op: that
    op's gradient differentiates an unfused reference (see ops/ops_fused.py).  None for an
    input the output does not depend on or that needs no gradient."""
    stop = {id(x) for x in inputs}
    _read_versions_used([output])
    order = postorder([output], lambda n: () if id(n) in stop else n.inputs)
    pending, found = {id(output): [cotangent]}, {}
    for node in reversed(order):
        grads = pending.pop(id(node), None)
        if grads is None or not node.requires_grad:
            continue
        adjoint = sum_node_list(grads)
        if id(node) in stop:
            found[id(node)] = adjoint
        elif node.op is not None:
            for inp, grad in zip(node.inputs, node.op.gradient_as_tuple(adjoint, node)):
                if inp.requires_grad and grad is not None:
                    pending.setdefault(id(inp), []).append(grad)
    return [found.get(id(x)) for x in inputs]


def _cut(adjoint: Value) -> Value:
    """An intermediate's `.grad` (the course keeps one on every node): its value, without
    the backward graph behind it.  That graph reaches back to the node itself (the
    gradient of exp(x) is made of exp(x)), so keeping it made every step's graph a
    reference cycle that only Python's slow full collections freed.
    Pending data stays pending: it is computed only if someone reads it."""
    return type(adjoint).make_const(adjoint._cached_data)


def _check_gradient(node: Value, i: int, inp: Value, grad) -> None:
    """A custom op's gradient() of the wrong shape or dtype is reported here, naming
    the op, instead of surfacing later as a broadcast error in the optimizer."""
    if not isinstance(inp, Tensor):
        return
    if isinstance(grad, Tensor):  # every gradient of every step: the data's shapes and dtypes first
        g, x = grad._cached_data, inp._cached_data
        if g is not None and x is not None and g.shape == x.shape and (g.dtype == x.dtype or BACKEND != "nd"):
            return
    where = f"backward: {type(node.op).__name__}.gradient() returned"
    if not isinstance(grad, Tensor):
        raise DTypeError(f"{where} a {type(grad).__name__} for input {i}; it must return Tensors")
    if grad.shape != inp.shape:
        raise ShapeError(f"{where} a gradient of shape {fmt_shape(grad.shape)} for input {i} of shape "
                         f"{fmt_shape(inp.shape)}; a gradient has its input's shape")
    if grad.dtype != inp.dtype and BACKEND == "nd":  # the np backend follows numpy's promotion
        raise DTypeError(f"{where} a {grad.dtype} gradient of shape {fmt_shape(grad.shape)} for input {i}, "
                         f"a {inp.dtype} tensor of shape {fmt_shape(inp.shape)}")


#: index assignments that built a graph so far (until then no graph reads an earlier version)
_ASSIGNMENTS = 0


def _read_versions_used(outputs) -> None:
    """Point each node built before an index assignment to one of its inputs (`y[0] += 2`
    after `y[0]` was read) at that input as the node read it: the assignment made the
    Tensor object the new value, and kept the old one (`_earlier`) for them."""
    if not _ASSIGNMENTS:
        return
    stack, seen = list(outputs), set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        saved, inputs = node._saved_versions, node.inputs
        for i, inp in enumerate(inputs):
            if saved and inp._version != saved[i]:
                inp = inputs[i] = next((old for version, old in inp._earlier if version == saved[i]), inp)
            stack.append(inp)


def _check_versions(node: Value) -> None:
    for i, (inp, seen) in enumerate(zip(node.inputs, node._saved_versions)):
        if inp._version != seen:
            raise GraphError(f"backward: input {i} of {type(node.op).__name__} (shape {fmt_shape(inp.shape)}) "
                             "was written in place after the op used it (a leaf written under no_grad(), "
                             "whose old values are gone); write it before using it, or write into a copy "
                             "(t = t.clone())")


def assign_functional(tensor: Tensor, update) -> None:
    """`tensor[idx] = v`: `tensor` becomes `update(old)`, a new node over a copy of its
    old self, so the graph keeps the old value for gradients.  A leaf that requires
    grad may be written only under `no_grad()` (its data is replaced, it stays a leaf)."""
    global _ASSIGNMENTS
    if tensor.op is None and tensor.requires_grad and autograd.GRAD_ENABLED:
        raise GraphError(f"setitem: a leaf tensor that requires grad (shape {fmt_shape(tensor.shape)}) cannot be "
                           "written in place: its gradient would no longer belong to it; write under "
                           "`with needle.no_grad():`, or into a copy (`t = t + 0`)")
    old = Tensor.__new__(Tensor)
    old._init(tensor.op, tensor.inputs, cached_data=tensor._cached_data, requires_grad=tensor.requires_grad)
    old._saved_versions, old._version = tensor._saved_versions, tensor._version
    new = update(old)
    tensor._cached_data = new._cached_data
    if new.op is not None or tensor.op is not None:
        tensor._earlier = tensor._earlier + ((tensor._version, old),)  # (what earlier nodes read: see
        _ASSIGNMENTS += 1                                             # _read_versions_used)
        tensor.op, tensor.inputs, tensor.requires_grad = new.op, new.inputs, new.requires_grad
        tensor._saved_versions = new._saved_versions
    else:  # a written leaf (a parameter under no_grad) is state: computed with the next schedule
        outlives_step(tensor)
    tensor._version += 1


def find_topo_sort(node_list: List[Value]) -> List[Value]:
    """Nodes in topological order: a post-order depth-first search that visits each
    node's inputs in order.  Iterative, so 10,000-deep graphs are fine."""
    return postorder(node_list, _inputs)


def _inputs(node: Value) -> List[Value]:
    return node.inputs


def sum_node_list(node_list):
    """Sum the nodes of a list without creating a redundant zero node."""
    total = node_list[0]
    for node in node_list[1:]:
        total = total + node
    return total
