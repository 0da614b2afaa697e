"""Hypothesis profiles of the fuzz tests.

- "ci" (default): a fixed number of examples from a derandomized (reproducible)
  search, sized to keep the whole directory to a couple of minutes on 2 cores
  with a cold kernel cache (each new kernel costs 20-100 ms to compile) and a
  few seconds warm;
- "long" (FUZZ=long): thousands of examples per test, random seeds, wider shapes.
  Run e.g. `FUZZ=long python -m pytest tests/fuzz -q -p no:cacheprovider
  --hypothesis-seed=$RANDOM --hypothesis-show-statistics`.

Every test scales its example count from the profile's `max_examples`
(`examples(fraction)`), so one knob sizes the whole directory: FUZZ_EXAMPLES
(default 1200 for "ci": about 75 s with a cold kernel cache on 2 cores, 15 s warm;
4000 for "long").  The CUDA-emulator tests (test_fuzz_cuda.py, and
test_fuzz_cuda_mappings.py with the CUDA lowering's size thresholds shrunk) run 2% of
that each, or FUZZ_CUDA_EXAMPLES programs: each new schedule costs a g++ build of
about a second.

Long-run record (FUZZ=long FUZZ_EXAMPLES=5000, seeds 11, 12, 13, two processes on
2 cores, 2026-12-02): 15,000 lazy fused programs, 2,500 eager, 3,000 bounds-checked
and 4,000 gradient programs — no mismatch, no crash (about 13 minutes in all).
The bugs the earlier runs found are in tests/fuzz/regressions.
"""
import os

from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                      HealthCheck.filter_too_much])
settings.register_profile("ci", max_examples=int(os.environ.get("FUZZ_EXAMPLES", 1200)), derandomize=True,
                          database=None, **_COMMON)
settings.register_profile("long", max_examples=int(os.environ.get("FUZZ_EXAMPLES", 4000)), derandomize=False,
                          database=None, **_COMMON)
settings.load_profile("long" if os.environ.get("FUZZ", "").strip().lower() == "long" else "ci")
