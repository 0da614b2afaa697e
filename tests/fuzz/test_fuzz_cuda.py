"""The fuzzer's programs on cuda(), lazy and bounds-checked: the CUDA lowering and
codegen against the same numpy program and error bounds as the CPU tests.  Without
a GPU the kernels run in the CPU emulator (tests/codegen/cuda_emulation), which
builds each schedule's CUDA C with g++ (about a second), so CI runs a small share
of the examples; FUZZ=long (or FUZZ_CUDA_EXAMPLES=n) runs more."""
import os

import pytest
from hypothesis import given, settings

from needle import config
from tests.codegen.cuda_emulation.gpu import cuda_runtime, pytestmark  # noqa: F401
from tests.fuzz import graphs, harness

#: share of the profile's examples: 2% of the CI profile's 1200 is 24 programs (here and in
#: test_fuzz_cuda_mappings.py, plus 8 gradient programs there: about 30 s of CPU time in
#: all with a cold emulator cache)
EXAMPLES = int(os.environ.get("FUZZ_CUDA_EXAMPLES", 0)) or max(1, int(settings().max_examples * 0.02))


@pytest.fixture(scope="module")
def gpu(tmp_path_factory):
    saved = config.CACHE_DIR
    config.CACHE_DIR = str(tmp_path_factory.mktemp("cuda-cache"))
    try:
        with cuda_runtime() as rt:
            yield rt
    finally:
        config.CACHE_DIR = saved


@settings(max_examples=EXAMPLES)
@given(prog=graphs.programs("forward"))
def test_cuda_matches_numpy_in_bounds(gpu, prog):
    harness.check_forward(prog, "cuda")
