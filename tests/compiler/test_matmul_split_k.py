"""A matmul of few rows and a deep K splits K between the threads: each thread
multiplies its share of K into a partial product, a second kernel sums them and
applies the epilogue.  Values against numpy float64, planned for AVX-512 and AVX2
tiles and 2-16 threads (run on however many this host gives: the parallel loop covers
every share either way), with bounds checking on and off."""
from dataclasses import replace

import numpy as np
import pytest

import needle as ndl
from needle import ops
from needle.compiler.schedule import plan, structure
from needle.engine import schedule_cache
from needle.engine.schedule_cache import cpu_target
from needle.ir.printer import output_nodes
from tests.compiler.operands import f64, lazy, tensor  # noqa: F401  (lazy: an autouse fixture)


def run(outputs, target):
    """(kernel names, output arrays) of the schedule planned for `target`."""
    nodes = output_nodes(outputs)
    signature = structure(nodes)
    schedule, _ = plan(nodes, target, signature)
    arrays = schedule_cache.compile_schedule(schedule, target).run(signature.leaves, signature.scalars, ndl.cpu())
    return [c.kernel for c in schedule.calls], [a.numpy() for a in arrays]


def target_for(vector_bytes, threads, bounds_check=False):
    host = cpu_target()
    target = replace(host.with_vector_bytes(vector_bytes), threads=threads, bounds_check=bounds_check)
    if not target.can_run_on(host):
        pytest.skip(f"this host cannot run {vector_bytes}-byte SIMD code")
    return target


@pytest.mark.parametrize("vector_bytes", [64, 32])
@pytest.mark.parametrize("threads", [2, 3, 4, 16])
@pytest.mark.parametrize("m, k, n", [
    (128, 784, 256),   # the MLP's first layer: whole panels, shares of 392 rows of K
    (100, 784, 100),   # MLPResNet's: a ragged last panel of columns
    (37, 901, 130),    # ragged rows, K not a multiple of 16, ragged columns
    (64, 512, 1024),   # B with rows 4096 bytes apart: packed, by K blocks of the shares
])
def test_split_k_with_bias_relu_epilogue(vector_bytes, threads, m, k, n):
    target = target_for(vector_bytes, threads)
    x, w, bias = tensor(m, k), tensor(k, n), tensor(1, n)
    y = ops.relu(x @ w + ops.broadcast_to(bias, (m, n)))
    kernels, (out,) = run([y], target)
    assert_split(kernels, m, k, threads)
    want = np.maximum(f64(x) @ f64(w) + f64(bias), 0)
    # float32 dot products of k terms (in shares, then summed): error below (k + 1) eps
    # sum|x_ik w_kj|, the bias's rounding included
    bound = (k + 2) * np.finfo(np.float32).eps * (np.abs(f64(x)) @ np.abs(f64(w)) + np.abs(f64(bias)))
    assert np.all(np.abs(out - want) <= bound)


def assert_split(kernels, m, k, threads):
    """The macro-kernel's parallel loop runs once per share of K: one per thread, but no
    more than K / (2 M), so that the partial products (shares x M x N) are at most half
    of B (K x N); each share a multiple of 16 rows.  The kernel summing them comes last."""
    parts = min(threads, k // (2 * m))
    macro = [kn for kn in kernels if kn.name.startswith("M_") and "_K" not in kn.name]
    sums = [kn for kn in kernels if kn.name.startswith("M_") and "_K" in kn.name]
    share = -(-k // (parts * 16)) * 16
    assert len(macro) == 1 and macro[0].parallel[1] == -(-k // share) == parts >= 2
    assert len(sums) == 1 and sums[0] is kernels[-1] and sums[0].name.endswith(f"_K{parts}")


@pytest.mark.parametrize("bounds_check", [False, True])
def test_split_k_stores_extra_roots_in_the_summing_kernel(bounds_check):
    """z = x @ w + b and relu(z) * 2 both kept: the summing kernel stores both (with
    every index checked: nothing read or written out of bounds)."""
    target = target_for(64 if cpu_target().vector_bytes >= 64 else 32, 2, bounds_check)
    x, w, bias = tensor(50, 700, ), tensor(700, 120), tensor(1, 120)
    z = x @ w + ops.broadcast_to(bias, (50, 120))
    r = ops.relu(z) * 2.0
    kernels, (got_z, got_r) = run([z, r], target)
    assert_split(kernels, 50, 700, 2)
    want = f64(x) @ f64(w) + f64(bias)
    bound = 702 * np.finfo(np.float32).eps * (np.abs(f64(x)) @ np.abs(f64(w)) + np.abs(f64(bias)))
    assert np.all(np.abs(got_z - want) <= bound)
    assert np.all(np.abs(got_r - 2 * np.maximum(want, 0)) <= 2 * bound)


@pytest.mark.parametrize("m, k, n, threads", [
    (128, 784, 256, 1),   # one thread: nothing to split
    (256, 784, 256, 2),   # K < 4 rows: split by rows
    (128, 1500, 256, 2),  # K deeper than one K block per thread
    (16, 256, 64, 2),     # an LSTM cell's: too little work to thread
])
def test_matmuls_that_keep_the_row_split(m, k, n, threads):
    target = target_for(64 if cpu_target().vector_bytes >= 64 else 32, threads)
    x, w = tensor(m, k), tensor(k, n)
    kernels, (out,) = run([x @ w], target)
    assert not any("_K" in kn.name for kn in kernels)
    want = f64(x) @ f64(w)
    assert np.all(np.abs(out - want) <= (k + 1) * np.finfo(np.float32).eps * (np.abs(f64(x)) @ np.abs(f64(w))))
