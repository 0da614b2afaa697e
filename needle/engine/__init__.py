"""The engine: the one door from pending work to computed data.

Today it holds captured steps (`needle.jit`): `capture` records one call, `state`
finds where its state lives, `replay` binds and reruns its schedules, `jit` is the
user-facing function.  The redesign moves realize, realize_later and the schedule
cache here.
"""
