"""A sample of the training-loop fuzzer (tests/fuzz/training_loops.py) in CI: random models,
optimizers, schedulers and habits, each program plain against jitted with every replay
verified; none may be silently different or fail only when jitted.  A long run:
`python tests/fuzz/training_loops.py --programs 1000 --seed 0`."""
import os

import pytest

import needle as ndl

from training_loops import program, verdict

PROGRAMS = int(os.environ.get("FUZZ_LOOPS", 24))


@pytest.mark.parametrize("seed", range(1000, 1000 + PROGRAMS))
def test_a_random_training_loop_is_never_silently_different(seed):
    with ndl.lazy(True):
        kind, detail = verdict(program(seed))
    assert kind in ("equal", "plain", "invalid"), f"seed {seed}: {kind}: {detail}\n{program(seed)}"
