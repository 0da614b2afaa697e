"""The fuzzer's programs once more with bounds-checked code generation
(config.BOUNDS_CHECK: every load and store checks its index and traps): no
generated kernel reads or writes outside its buffers.  A BoundsError fails the
test like a wrong value does."""
from hypothesis import given, settings

from tests.fuzz import graphs, harness


@settings(max_examples=max(1, int(settings().max_examples * 0.3)))
@given(graphs.programs("forward"))
def test_kernels_stay_in_bounds(prog):
    harness.check_forward(prog, "bounds")
