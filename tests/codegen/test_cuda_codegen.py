"""CUDA code generation without a GPU.

- every kernel the cases in cuda_emulation/cases.py generate for CUDA (plain and
  bounds-checked), and the `dump(stage="cuda")` text, compile with nvcc -arch=sm_90
  (one nvcc run each; skipped when nvcc is absent);
- the same kernels run on the CPU under the fiber emulator (cuda_emulation/shim.h)
  and match the reference executor: index math, masks, grid-stride remainders,
  shared-memory tiles and barriers, warp shuffles; each schedule runs under two
  scheduling offsets so both directions of a missing barrier show;
- the CUDA runtime runs end to end against a PyCUDA stand-in backed by the
  emulator (cuda_emulation/fake_pycuda.py): devices, copies, eager and lazy ops,
  setitem, caches, debug output;
- without PyCUDA, cuda() is disabled and says so.
"""
import os
import shutil
import subprocess

import numpy as np
import pytest

import needle as ndl
from needle.engine.schedule_cache import cpu_target, cuda_target  # noqa: F401
from needle.codegen import cuda as cuda_codegen
from needle.codegen import kernel_ir as K
from needle.compiler import schedule as scheduling
from needle.errors import DeviceError
from needle.ir import reference

from cuda_emulation import cases, harness

NVCC = shutil.which("nvcc")


@pytest.fixture(scope="module")
def planned():
    """name -> (output nodes, Schedule) for every case."""
    out = {}
    for name in cases.CASES:
        nodes = cases.build_case(name)
        out[name] = (nodes, scheduling.plan(nodes, cuda_target())[0])
    return out


@pytest.fixture(scope="module")
def emulated(planned):
    if not harness.have_compiler():
        pytest.skip("g++ is not installed")
    module, names = harness.module_for([s for _, s in planned.values()])
    return module, dict(zip(planned, names))


# ---- nvcc -----------------------------------------------------------------------------------------
@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_every_kernel_compiles_with_nvcc(planned, tmp_path):
    """All kernels in one translation unit through ptxas (-cubin: registers, shared
    memory limits), and their bounds-checked variants to PTX, two nvcc runs at once."""
    kernels = [c.kernel for _, s in planned.values() for c in s.calls]
    names = [f"{k.name}_{i}" for i, k in enumerate(kernels)]
    (tmp_path / "plain.cu").write_text(cuda_codegen.render_module(kernels, names))
    (tmp_path / "checked.cu").write_text(cuda_codegen.render_module(kernels, names, bounds_check=True))
    runs = [subprocess.Popen([NVCC, "-arch=sm_90", flag, "-o", str(tmp_path / f"{name}.out"),
                              str(tmp_path / f"{name}.cu")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
            for name, flag in (("plain", "-cubin"), ("checked", "-ptx"))]
    for run in runs:
        _, err = run.communicate()
        assert run.returncode == 0, err[-4000:]
    assert len(kernels) > 80  # the workloads' kernels, after fusion merged what it could


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_dump_cuda_stage_is_one_translation_unit(tmp_path):
    x = ndl.Tensor(np.random.randn(8, 30).astype(np.float32))
    w = ndl.Tensor(np.random.randn(30, 50).astype(np.float32))
    y = ndl.ops.logsumexp(ndl.ops.relu(x @ w), axes=(1,))
    text = ndl.ir.dump(y, stage="cuda")
    assert 'extern "C" __global__' in text and "__syncthreads" in text
    src = tmp_path / "dump.cu"
    src.write_text(text)
    proc = subprocess.run([NVCC, "-arch=sm_90", "-ptx", "-o", str(tmp_path / "dump.ptx"), str(src)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]


# ---- emulation ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(cases.CASES))
def test_emulated_kernels_match_reference(planned, emulated, name):
    nodes, schedule = planned[name]
    module, names = emulated
    leaves, _, scalars, _ = scheduling.graph_inputs(nodes)
    expected = reference.evaluate(nodes)
    tol = cases.CASES[name][1]
    for policy in (0, 2):
        got = harness.run_schedule(module, names[name], schedule, leaves, scalars, policy=policy)
        for g, e, n in zip(got, expected, nodes):
            assert g.shape == e.shape == n.shape and g.dtype == e.dtype
            if g.dtype.kind == "f":
                np.testing.assert_allclose(g, e, equal_nan=True, **tol)
            else:
                np.testing.assert_array_equal(g, e)


def test_emulation_catches_a_missing_barrier():
    src = ('extern "C" __global__ void rev(float* __restrict__ out, const float* __restrict__ in) {\n'
           "  __shared__ float s[64];\n  s[threadIdx.x] = in[threadIdx.x];\n  SYNC\n"
           "  out[threadIdx.x] = s[63 - threadIdx.x];\n}\n")
    x = np.arange(64, dtype=np.float32)
    for sync, correct in (("__syncthreads();", True), ("", False)):
        out = np.zeros(64, dtype=np.float32)
        harness.Module(src.replace("SYNC", sync)).launch("rev", [out.ctypes.data, x.ctypes.data], 1, 64)
        assert np.array_equal(out, x[::-1]) == correct


def test_emulation_reports_divergent_barriers():
    src = ('extern "C" __global__ void bad(float* __restrict__ out) {\n'
           "  if (threadIdx.x < 10) __syncthreads();\n  out[threadIdx.x] = 1.0f;\n}\n")
    out = np.zeros(64, dtype=np.float32)
    with pytest.raises(AssertionError, match="deadlock"):
        harness.Module(src).launch("bad", [out.ctypes.data], 1, 64)


# ---- lowering shapes ------------------------------------------------------------------------------
def test_every_kernel_has_a_launch_shape_and_no_cpu_only_loops(planned):
    for _, schedule in planned.values():
        for c in schedule.calls:
            k = c.kernel
            assert k.block % 32 == 0 and k.grid >= 1
            stack = list(k.body)
            while stack:
                s = stack.pop()
                if isinstance(s, K.Loop):
                    assert s.kind != "vector", k.name
                    stack.extend(s.body)
                elif isinstance(s, K.If):
                    stack.extend(s.body)


def _mappings(planned, name):
    return [c.kernel.mapping for c in planned[name][1].calls]


def test_reduction_mappings(planned):
    assert set(_mappings(planned, "softmax_layernorm_logsumexp")) == {"rows"}
    assert "columns" in _mappings(planned, "reduce_columns_and_tiny")
    assert "split" in _mappings(planned, "reduce_split") and "split-rows" in _mappings(planned, "reduce_split")
    softmax = planned["softmax_layernorm_logsumexp"][1].calls[0].kernel
    assert sum(1 for s in softmax.body if isinstance(s, K.LocalArray) and s.scope == "shared") == 2


def test_matmul_tiles_and_epilogue(planned):
    small = planned["matmul_small_tile_ragged_epilogue"][1]
    assert len(small.calls) == 1  # bias + relu fused on store
    assert small.calls[0].kernel.mapping.startswith("tiles 64x64x16")
    assert planned["matmul_large_tile"][1].calls[0].kernel.mapping.startswith("tiles 128x128x8")
    assert any(m.startswith("grid-stride") for m in _mappings(planned, "matmul_dtypes"))


def test_cpu_lowering_unchanged_by_the_cuda_target():
    x = ndl.Tensor(np.random.randn(16, 40).astype(np.float32))
    y = ndl.ops.logsumexp(x, axes=(1,))
    from needle.ir.printer import output_nodes
    cpu, _ = scheduling.plan(output_nodes([y]), cpu_target())
    assert all(c.kernel.block == 0 and c.kernel.grid == 0 and not c.kernel.mapping for c in cpu.calls)
    assert "Special" not in repr(cpu.calls[0].kernel.body) and "Shuffle" not in repr(cpu.calls[0].kernel.body)


def test_literals_are_exact():
    assert cuda_codegen.literal(0.1, "float32") == "0.1f"
    assert cuda_codegen.literal(float("-inf"), "float32") == "(-__int_as_float(0x7f800000))"
    assert cuda_codegen.literal(-2 ** 63, "int64") == "(-9223372036854775807LL - 1)"
    assert cuda_codegen.literal(True, "bool") == "true"
    assert np.float32(cuda_codegen.literal(1e-45, "float32")[:-1]) == np.float32(1e-45)


def test_grid_stride_unravel_matches_numpy():
    from needle.compiler.kernel_exprs import unravel_lets
    dims = [("a", 3), ("b", 5), ("c", 7)]
    lets = unravel_lets(K.Var("g"), dims)
    assert [l.var for l in lets] == ["a", "b", "c"]
    for g in range(3 * 5 * 7):
        text = [K.expr_str(l.expr).replace("g", str(g)) for l in lets]
        assert tuple(eval(t) for t in text) == np.unravel_index(g, (3, 5, 7))  # noqa: S307 (// and %: Python's)
    assert K.expr_str(lets[0].expr) == "(g // 35)"  # no mod for the outermost dim


# ---- availability (this machine has no GPU driver) ------------------------------------------------
def test_cuda_disabled_without_pycuda_driver_or_gpu():
    from needle.runtime import cuda as rt
    ok, why = rt.available()
    if ok:
        pytest.skip("a GPU is available here")
    assert str(ndl.cuda()) == "cuda()" and ndl.cuda() == ndl.nd.cuda()
    assert ndl.cuda().enabled() is False
    assert any(word in why for word in ("PyCUDA", "driver", "GPU"))
    with pytest.raises(DeviceError, match="cuda\\(\\) is not available: .*(PyCUDA|driver|GPU)"):
        ndl.Tensor([1.0, 2.0], device=ndl.cuda())
    with pytest.raises(DeviceError):
        ndl.Tensor([1.0]).to(ndl.cuda())
    with pytest.raises(DeviceError):
        ndl.nn.Linear(3, 4, device=ndl.cuda())


def test_pyproject_has_cuda_extra():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "pyproject.toml")) as f:
        assert 'cuda = ["pycuda' in f.read()
