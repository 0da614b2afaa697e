"""The engine: the one door from pending work to computed data.

Today it holds captured steps (`needle.jit`: `capture` records one call, `jit`
replays it); the redesign moves realize, realize_later and the schedule cache here.
"""
