"""Planners: the baselines (exact, bounded, bfs, greedy), each importable as
``passage_jax.planners.<name>:make_planner`` (a factory taking ``inference_kwargs``)."""
BASELINES = ("exact", "bounded", "bfs", "greedy")
