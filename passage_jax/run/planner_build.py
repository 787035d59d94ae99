"""Building a planner in the run's own process, with the error that names its entry point."""
from __future__ import annotations

from passage_jax.protocol.adapters import load_planner

__all__ = ["PlannerBuildError", "build_planner"]


class PlannerBuildError(RuntimeError):
    """Building the planner failed (the message names the entry point and the exception)."""


def build_planner(inference: str, inference_format: str = "request", kwargs: dict | None = None):
    """The planner of entry point ``inference`` (:func:`~passage_jax.protocol.adapters.load_planner`);
    any failure is a :class:`PlannerBuildError` naming the entry point and the exception."""
    try:
        return load_planner(inference, inference_format, kwargs or {})
    except Exception as e:  # noqa: BLE001  (reported with the entry point)
        raise PlannerBuildError(f"building the planner {inference} failed: "
                                f"{type(e).__name__}: {e}") from e
