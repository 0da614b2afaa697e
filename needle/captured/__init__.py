"""Captured steps (`needle.jit`): call 2 of a jitted function records what it does
(the engine's `capture.recording`), later calls replay it.  This package is the
frontend's side: it knows Tensors, Modules and optimizers —

- `function`: JitFunction, the contract (docs/jit.md), choosing a capture or running plainly;
- `arguments`: a call's inputs and key; `numpy_args`: numpy arguments traced with recipes;
- `world`: the Python state a step can read and change, `world_guards` its checks before
  a replay, `world_effects` what a call changed in it; `places`:
  where a value lives and how values compare; `code`: which code is the user's;
- `tracing`: what the capture call runs (sys.setprofile);
- `build`: a recorded call -> `step.CapturedStep` (`records`: its typed parts);
- `verify`: a replay checked against a plain call."""
