"""Building a planner in the run's own process, with the error that names its entry point."""
from __future__ import annotations

from passage_jax.protocol.adapters import load_planner
from passage_jax.run.execution import interrupts

__all__ = ["PlannerBuildError", "build_planner"]


class PlannerBuildError(RuntimeError):
    """Building the planner failed (the message names the entry point and the exception)."""


def build_planner(inference: str, inference_format: str = "request", kwargs: dict | None = None):
    """The planner of entry point ``inference`` (:func:`~passage_jax.protocol.adapters.load_planner`);
    any failure, ``SystemExit`` and ``KeyboardInterrupt`` included, is a
    :class:`PlannerBuildError` naming the entry point and the exception (the evaluator's
    own SIGINT/SIGTERM stops the run: :mod:`passage_jax.run.execution.interrupts`)."""
    with interrupts.planner_call():
        try:
            planner = load_planner(inference, inference_format, kwargs or {})
        except BaseException as e:  # noqa: BLE001  (reported with the entry point)
            interrupts.raise_if_received()
            try:
                text = f"{type(e).__name__}: {e}"
            except BaseException:  # noqa: BLE001  (its __str__ raised)
                text = type(e).__name__
            raise PlannerBuildError(f"building the planner {inference} failed: {text}") from e
        interrupts.raise_if_received()  # a signal the construction swallowed
    return planner
