"""The LLVM renderer's loops on small hand-made kernels with known answers: which outer
loops LLVM is told not to unroll (codegen/llvm_statements.py `_loop_id`), and one-trip loops
rendered as straight code; each kernel is also compiled and run against numpy."""
import ctypes
import math
import re

import llvmlite.binding as llvm
import numpy as np
import pytest

from needle import config
from needle.codegen import kernel_ir as K
from needle.codegen import llvm as renderer
from needle.codegen import llvm_statements
from needle.engine.schedule_cache import cpu_target
from needle.runtime import llvm_compile


def nest_kernel(extents, unary: str = None, hot: bool = False):
    """out[i0, i1, ...] = in[i0, i1, ...] * 2 (or unary(in[...]), a float32 Unary op)
    over loops of `extents` (outermost first), inside a parallel loop of one trip;
    `hot` as the compiler would have marked it."""
    names = [f"i{d}" for d in range(len(extents))]
    index = K.const(0)
    for name, extent in zip(names, extents):
        index = K.add(K.mul(index, K.const(extent)), K.Var(name))
    value = K.Binary("mul", K.Load("src", index, "float32"), K.Const(2.0, "float32"), "float32")
    if unary is not None:
        value = K.Unary(unary, K.Load("src", index, "float32"), "float32")
    body = [K.Store("dst", index, value)]
    for name, extent in reversed(list(zip(names, extents))):
        body = [K.Loop(name, extent, body)]
    bufs = [K.Buf("src", "float32", "in"), K.Buf("dst", "float32", "out")]
    return K.Kernel("nest", bufs, 0, [K.Loop("q", 1, body, "parallel")], ("q", 1), work=math.prod(extents),
                    hot=hot)


def marked_loops(text: str, option: str = '!"llvm.loop.unroll.disable"') -> set:
    """The loop variables whose latch carries a loop ID (a node whose first operand is
    itself) with the setting `option` (its text in the module)."""
    ids = {m.group(1) for m in re.finditer(r'^!(\d+) = !\{ ?!\1, !(\d+) ?\}$', text, re.M)
           if re.search(rf'^!{m.group(2)} = !\{{ ?{re.escape(option)} ?\}}$', text, re.M)}
    return {m.group(1) for m in re.finditer(r'br label %"(\w+)\.head", !llvm.loop !(\d+)', text)
            if m.group(2) in ids}


def run(text: str, x: np.ndarray) -> np.ndarray:
    """The kernel's entry point compiled and called on `x` (one trip of its parallel loop)."""
    target = cpu_target()
    module = llvm_compile.optimize(text, target.cpu, target.features, "O2")
    engine = llvm.create_mcjit_compiler(module, llvm_compile.new_machine(target.cpu, target.features))
    engine.finalize_object()
    entry = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                             ctypes.c_void_p, ctypes.c_void_p)(engine.get_function_address("nest"))
    out = np.full_like(x, np.nan)
    bufs = (ctypes.c_void_p * 2)(x.ctypes.data, out.ctypes.data)
    err = np.zeros(1, np.int32)
    entry(ctypes.addressof(bufs), None, 0, 1, None, err.ctypes.data)
    return out


@pytest.mark.parametrize("extents, marked", [  # (q: the parallel loop around them all)
    ((6, 6, 32), {"q", "i0", "i1"}),  # a padded copy's 6 x 6 around 32 channels: 36 copies otherwise
    ((6, 4), {"q"}),                  # 4 trips inside i0: left to LLVM
    ((8, 4, 4), {"q", "i0"}),         # 16 trips inside i0, 4 inside i1
    ((3, 2, 2), set()),               # a pooling window: 12 trips in all, unrolled as before
    ((5, 1, 20), {"q", "i0"}),        # the one-trip loop is no loop: i0 holds i2's 20 trips
])
def test_outer_loops_with_many_inner_trips_are_not_unrolled(extents, marked):
    text = renderer.render(nest_kernel(extents), "nest")
    assert marked_loops(text) == marked
    x = np.arange(int(np.prod(extents)), dtype=np.float32).reshape(extents) - 7.5
    np.testing.assert_array_equal(run(text, x), x * 2)  # exact: doubling is


def test_a_one_trip_loop_is_straight_code():
    text = renderer.render(nest_kernel((3, 1, 4)), "nest")
    assert '"i1.head"' not in text and '"i0.head"' in text and '"i2.head"' in text
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 1, 4)
    np.testing.assert_array_equal(run(text, x), x * 2)


INTERLEAVED = f'!"llvm.loop.interleave.count", i32 {llvm_statements.TRANSCENDENTAL_INTERLEAVE}'


@pytest.mark.parametrize("unary, extents, hot, marked", [
    ("exp", (20000,), True, {"i0"}),   # the innermost loop of a transcendental: interleaved
    ("tanh", (4, 5000), True, {"i1"}),  # only the innermost one
    ("tanh", (1000,), False, set()),    # a kernel that runs little: not worth the compile time
    ("abs", (20000,), True, set()),     # no transcendental: LLVM decides
    (None, (20000,), True, set()),
])
def test_innermost_loops_of_transcendentals_interleave(unary, extents, hot, marked):
    text = renderer.render(nest_kernel(extents, unary, hot), "nest")
    assert marked_loops(text, INTERLEAVED) == marked
    x = np.linspace(-3, 3, int(np.prod(extents)), dtype=np.float32).reshape(extents)
    expected = {"exp": np.exp, "tanh": np.tanh, "abs": np.abs, None: lambda v: v * 2}[unary](x.astype(np.float64))
    # within 1 ulp of the correctly rounded result (vecmath): 1.5 ulp of float64s at most
    np.testing.assert_allclose(run(text, x), expected, rtol=1.5 * 2.0 ** -23, atol=1e-45)


def _fold(acc="acc"):
    return K.Assign(acc, K.Binary("add", K.Var(acc, "float32"), K.Load("in0", K.Var("r"), "float32"), "float32"))


@pytest.mark.parametrize("body, short", [
    ([K.Loop("r", 10, [_fold()])], True),                                    # a reduction over rows of 10
    ([K.Loop("r", 10, [_fold(f"acc{u}") for u in range(4)])], True),         # four rows jammed
    ([K.Loop("r", 33, [_fold()])], False),                                   # a longer row
    ([K.Loop("r", 10, [_fold(f"acc{u}") for u in range(5)])], False),        # a large body
    ([K.Loop("r", 10, [K.Store("out0", K.Var("r"), K.Const(1.0, "float32"))])], False),  # stores
    ([K.Loop("r", 4, [K.Loop("c", 64, [_fold()])])], False),                 # short, but not innermost
    ([K.Loop("c", 64, [K.Loop("r", 8, [_fold()])])], True),                  # innermost and short
    ([K.If(K.Const(True, "bool"), [K.Loop("r", 8, [_fold()])])], True),      # under an if
])
def test_a_short_loop_is_an_innermost_fold_of_few_trips(body, short):
    """Kernel.has_short_loop picks the loops LLVM's unrolling pays for at any kernel size
    (runtime/jit.py level_for): innermost, at most 32 constant trips, 1-4 folds into
    accumulators and nothing else."""
    kernel = K.Kernel("R_test", [K.Buf("in0", "float32", "in"), K.Buf("out0", "float32", "out")], 0, body)
    assert kernel.has_short_loop() == short


def _planned_kernel(tensor):
    from needle.compiler.schedule import plan
    from needle.ir.printer import output_nodes
    (call,) = plan(output_nodes([tensor]), cpu_target())[0].calls
    return call.kernel


def test_what_the_renderer_reads_of_the_setting_is_in_the_cache_key(monkeypatch):
    """A sum of exp over rows of 10 has a short innermost loop, so the JIT compiles it
    at the full level whatever its size (jit.level_for): whether its exp loop is
    interleaved (NEEDLE_UNROLL_MIN_WORK) must then show in the kernel's text, or two
    settings would share one cached object of different code."""
    import needle as ndl
    from needle.runtime import jit

    def kernel_at(least_work):
        monkeypatch.setattr(config, "UNROLL_MIN_WORK", least_work)
        with ndl.lazy(True):
            x = ndl.Tensor(np.ones((64, 10), np.float32), requires_grad=False)
            kernel = _planned_kernel(ndl.ops.exp(x).sum((1,)))
        assert kernel.has_short_loop()
        return kernel, jit.kernel_key(kernel, cpu_target(), renderer)
    (cold, cold_key), (hot, hot_key) = kernel_at(1 << 14), kernel_at(0)
    assert not cold.hot and hot.hot
    assert not marked_loops(renderer.render(cold, "nest"), INTERLEAVED)
    assert marked_loops(renderer.render(hot, "nest"), INTERLEAVED)
    assert cold_key != hot_key
