"""Cold compilation: a schedule's new kernels compiled by worker processes give the
same object code and the same values as compiling here; the optimization level is
part of the cache key; a failing compile names its kernel; nothing is leaked."""
import os
import pickle
import subprocess
import sys
import threading

import numpy as np
import pytest

import needle as ndl
import needle.runtime as rt
from needle import config
from needle.codegen import llvm as llvm_codegen
from needle.engine import schedule_cache
from needle.errors import CompileError
from needle.runtime import compile_pool, jit, llvm_compile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def cold(monkeypatch):
    """No disk cache, empty memory caches: every kernel of the test is compiled."""
    monkeypatch.setattr(config, "CACHE", False)
    schedule_cache.clear()
    jit._compiled.clear()
    yield monkeypatch
    schedule_cache.clear()


def several_kernels(rng):
    """A graph of several kernels (matmul, row softmax, column sum) and its float64 value."""
    a = rng.standard_normal((37, 53)).astype(np.float32)
    b = rng.standard_normal((53, 29)).astype(np.float32)
    x, w = ndl.Tensor(a, device=ndl.cpu()), ndl.Tensor(b, device=ndl.cpu())
    h = ndl.ops.relu(x @ w)
    e = ndl.ops.exp(h - h.max(axes=(1,)).reshape((37, 1)).broadcast_to((37, 29)))
    y = e / e.sum(axes=(1,)).reshape((37, 1)).broadcast_to((37, 29)) + h.sum(axes=(0,)).broadcast_to((37, 29))
    h64 = np.maximum(a.astype(np.float64) @ b.astype(np.float64), 0)
    e64 = np.exp(h64 - h64.max(1, keepdims=True))
    return y, e64 / e64.sum(1, keepdims=True) + h64.sum(0, keepdims=True)


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_parallel_and_serial_compiles_agree_with_numpy(cold, workers):
    cold.setattr(config, "COMPILE_WORKERS", workers)
    before = rt.stats()["kernels_compiled"]
    y, expected = several_kernels(np.random.default_rng(3))
    got = y.numpy()
    assert rt.stats()["kernels_compiled"] - before >= 2  # more than one kernel: the pool was used
    # float32 products of 53 terms and a softmax: a few ulp of the largest magnitude
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def test_worker_object_code_is_the_in_process_object_code(cold):
    """Same LLVM, same IR, same CPU: the bytes a worker returns are the bytes this process makes."""
    seen = []  # (LLVM IR, level) of each kernel, rendered as it is compiled (its statements go after)
    compile_kernels = jit.compile_kernels

    def capture(kernels, *a):
        seen.extend((str(llvm_codegen.render(k, f"k_{len(seen) + i}", bounds_check=False)), jit.level_for(k))
                    for i, k in enumerate(kernels))
        return compile_kernels(kernels, *a)
    cold.setattr(jit, "compile_kernels", capture)
    several_kernels(np.random.default_rng(4))[0].numpy()
    assert len(seen) >= 2
    target = schedule_cache.cpu_target()
    jobs = [llvm_compile.Job(target.cpu, target.features, level, ir) for ir, level in seen]
    pooled = compile_pool.compile_all(iter(jobs), 2)
    here = [llvm_compile.compile_ir(ir, target.cpu, target.features, level) for ir, level in seen]
    assert [ok for ok, _ in pooled] == [True] * len(jobs)
    assert [obj for _, obj in pooled] == here


def test_workers_render_needles_kernels_as_this_process_does(cold):
    """A job carrying the kernel (rendered in the worker, which imports needle's code
    generator without the package's __init__) gives the bytes of rendering and
    compiling here."""
    jobs = []
    compile_kernels = jit.compile_kernels

    def capture(kernels, target, renderer):
        jobs.extend(llvm_compile.Job(target.cpu, target.features, jit.level_for(k), None, renderer.__name__, k,
                                     f"k_{len(jobs) + i}", target.bounds_check, target.vector_bytes)
                    for i, k in enumerate(kernels))
        here.extend(llvm_compile.compile_ir(llvm_codegen.render(k, f"k_{len(here) + i}", bounds_check=target.bounds_check,
                                                                 vector_bytes=target.vector_bytes),
                                            target.cpu, target.features, jit.level_for(k))
                    for i, k in enumerate(kernels))
        # (copied now, as a worker receives them: compile_kernels releases their statements after)
        jobs[-len(kernels):] = [pickle.loads(pickle.dumps(j)) for j in jobs[-len(kernels):]]
        return compile_kernels(kernels, target, renderer)
    here = []
    cold.setattr(jit, "compile_kernels", capture)
    several_kernels(np.random.default_rng(9))[0].numpy()
    assert len(jobs) >= 2 and jobs[0].renderer == "needle.codegen.llvm"
    pooled = compile_pool.compile_all(iter(jobs), 2)
    assert [ok for ok, _ in pooled] == [True] * len(jobs)
    assert [obj for _, obj in pooled] == here


def test_a_worker_does_not_import_needle():
    """The worker's imports: llvmlite, numpy and needle.codegen, not needle's package."""
    code = ("import sys, runpy; m = runpy.run_path(sys.argv[1]); m['_package_without_init'](); "
            "import needle.codegen.llvm; print(sorted(k for k in sys.modules if k.startswith('needle')))")
    out = subprocess.run([sys.executable, "-c", code, llvm_compile.__file__], capture_output=True, text=True,
                         check=True, cwd="/").stdout
    loaded = eval(out)
    assert "needle.codegen.llvm" in loaded
    assert all(k == "needle" or k.startswith("needle.codegen") for k in loaded), loaded


class FakeKernel:
    def __init__(self, name, work, hot=True):
        self.name, self.work, self.hot = name, work, hot  # (hot: the compiler's mark, from the target)

    def text(self):
        return f"kernel {self.name} work {self.work}"

    code_text = text

    def has_short_loop(self):
        return False


class BrokenRenderer:
    """Renders every kernel as IR that does not parse."""

    @staticmethod
    def fingerprint():
        return "broken-renderer"

    @staticmethod
    def render(kernel, symbol, bounds_check, vector_bytes=0):
        return f"define void @{symbol}() {{ this is not LLVM IR }}"


def test_opt_level_is_part_of_the_cache_key(monkeypatch):
    """A kernel the compiler did not mark hot (fewer elements than the target's
    unroll_min_work) compiles at "O2-nounroll"; the level is part of the key."""
    target = schedule_cache.cpu_target()
    small, big = FakeKernel("E_small", 100, hot=False), FakeKernel("E_big", 1 << 20)
    monkeypatch.setattr(config, "OPT_LEVEL", "O2")
    assert jit.level_for(small) == "O2-nounroll" and jit.level_for(big) == "O2"
    keys = {jit.kernel_key(small, target, BrokenRenderer), jit.kernel_key(big, target, BrokenRenderer)}
    small.hot = True  # (planned for a target whose unroll_min_work is below its work)
    assert jit.level_for(small) == "O2"
    keys.add(jit.kernel_key(small, target, BrokenRenderer))
    monkeypatch.setattr(config, "OPT_LEVEL", "O3")
    keys.add(jit.kernel_key(small, target, BrokenRenderer))
    assert len(keys) == 4  # same kernel text, three levels: three keys


def _kernels_of(tensor) -> list:
    from needle.compiler.schedule import plan
    from needle.ir.printer import output_nodes
    return [c.kernel for c in plan(output_nodes([tensor]), schedule_cache.cpu_target())[0].calls]


@pytest.mark.parametrize("rows,row,short", [(64, 10, True), (64, 32, True), (64, 33, False), (64, 4096, False)])
def test_small_kernels_with_a_short_innermost_loop_are_unrolled(monkeypatch, rows, row, short):
    """A row sum over rows of at most 32 is compiled at the full level however small
    the kernel (its innermost loop is worth unrolling); an elementwise kernel, or rows
    longer than that, at "O2-nounroll" below UNROLL_MIN_WORK."""
    monkeypatch.setattr(config, "UNROLL_MIN_WORK", 1 << 62)
    monkeypatch.setattr(config, "OPT_LEVEL", "O2")
    with ndl.lazy(True):
        x = ndl.Tensor(np.ones((rows, row), np.float32), requires_grad=False)
        (total,) = _kernels_of(x.sum((1,)))
        (plain,) = _kernels_of(x * 2.0 + 1.0)
    assert total.has_short_loop() == short and not plain.has_short_loop()
    assert jit.level_for(total) == ("O2" if short else "O2-nounroll") and jit.level_for(plain) == "O2-nounroll"


@pytest.mark.parametrize("level", ["O2", "O3", "O2-nounroll"])
def test_every_level_computes_the_same_values(cold, level):
    cold.setattr(config, "OPT_LEVEL", "O3" if level == "O3" else "O2")
    cold.setattr(config, "UNROLL_MIN_WORK", 1 << 62 if level == "O2-nounroll" else 0)
    y, expected = several_kernels(np.random.default_rng(8))
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("workers", [0, 2])
def test_failing_compile_raises_compile_error_naming_the_kernel(cold, workers):
    cold.setattr(config, "COMPILE_WORKERS", workers)
    kernels = [FakeKernel("E_first_ok_name", 10), FakeKernel("E_second_name", 10)]
    with pytest.raises(CompileError, match="E_first_ok_name.*does not verify"):
        jit.compile_kernels(kernels, schedule_cache.cpu_target(), BrokenRenderer)


def test_a_dead_worker_is_replaced(cold):
    cold.setattr(config, "COMPILE_WORKERS", 2)
    several_kernels(np.random.default_rng(5))[0].numpy()
    for pid in compile_pool.worker_pids():
        os.kill(pid, 9)
    schedule_cache.clear()
    jit._compiled.clear()
    y, expected = several_kernels(np.random.default_rng(6))
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def test_no_threads_left_and_shutdown_stops_the_workers(cold):
    cold.setattr(config, "COMPILE_WORKERS", 2)
    several_kernels(np.random.default_rng(7))[0].numpy()
    assert not [t for t in threading.enumerate() if t.name.startswith("needle-compile")]
    workers = list(compile_pool._idle)
    assert workers
    compile_pool.shutdown()
    assert compile_pool.worker_pids() == []
    assert all(w.proc.returncode is not None for w in workers)  # exited and reaped


def test_workers_exit_with_their_parent(tmp_path):
    """A parent that dies without cleanup (os._exit) closes the workers' stdin: they exit."""
    script = (
        "import numpy as np, needle as ndl\n"
        "from needle import config\n"
        "from needle.runtime import compile_pool\n"
        "config.CACHE, config.COMPILE_WORKERS = False, 2\n"
        "x = ndl.Tensor(np.ones((33, 17), np.float32), device=ndl.cpu())\n"
        "(ndl.ops.exp(x @ x.transpose()) .sum(axes=(1,))).numpy()\n"
        "print(' '.join(map(str, compile_pool.worker_pids())), flush=True)\n"
        "import os; os._exit(0)\n")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    pids = [int(p) for p in done.stdout.split()]
    assert pids
    for pid in pids:  # orphans are reaped by init; wait (bounded) until each is gone
        _wait_gone(pid)


def _wait_gone(pid, tries=200):
    import time
    for _ in range(tries):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    return  # exited, not yet reaped by its new parent
        except FileNotFoundError:
            return
        time.sleep(0.05)
    raise AssertionError(f"compile worker {pid} outlived its parent")
