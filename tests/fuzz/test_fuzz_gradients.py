"""Differential fuzzing of gradients: random differentiable float64 programs on
finite, well-conditioned values; `backward()` against central finite differences
of the independent numpy program (a fixed random weighting of the output, so
permuted adjoints are caught).  Ops that divide or take logs use safe forms
(x / (y*y + 0.5), log(x*x + 0.5)); programs with a relu input or a max tie within
reach of the difference step are skipped."""
from hypothesis import assume, given, settings

from tests.fuzz import graphs, harness
from tests.fuzz.graphs import compile_program


@settings(max_examples=max(1, int(settings().max_examples * 0.4)))
@given(graphs.programs("gradient", max_steps=5))
def test_backward_matches_finite_differences(prog):
    _, numpy_fn = compile_program(prog)
    assume(harness.well_conditioned(prog, numpy_fn(prog.inputs)))
    harness.check_gradients(prog)
