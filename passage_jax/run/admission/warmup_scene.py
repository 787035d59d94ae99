"""The warm-up scene of a session timing profile (contract §7, Timing profiles).

A session (``native_raw_path_persistent_v1``, ``supervised_service_v1``,
``supervised_service_rewarm_v1``) runs ``session_warmup`` untimed calls on one scene of
the dataset root's ``validation`` split at the run's resolution that is not a task of
the run: the spec's ``warmup_scene`` (a sample id), or by default the first validation
scene, in the split's stored order, whose id is not in the roster. The warm-up task is
built like any task (the run's objective, task variant and released weight; the run's
budget applies to its calls); it is never recorded as a request and never scored.
"""
from __future__ import annotations

from pathlib import Path

from passage_jax.data import DataError, check_weight, iter_scenes, present_splits
from passage_jax.data.scene import Task

__all__ = ["WARMUP_SPLIT", "WarmupSceneError", "warmup_task"]

#: the split the warm-up scene comes from
WARMUP_SPLIT = "validation"


class WarmupSceneError(ValueError):
    """No usable warm-up scene (the message is one line naming ``warmup_scene``)."""


def _where(root, resolution: int) -> str:
    return f"{Path(root)}/{resolution}x{resolution}/{WARMUP_SPLIT}"


def warmup_task(spec, root, roster_ids) -> Task:
    """The warm-up task of ``spec`` (a session profile) read from ``root``; ``roster_ids``:
    the sample ids of the run's tasks. :class:`WarmupSceneError` when the root has no
    validation split at the run's resolution, the named scene is not in it or is a task
    of the run, or every validation scene is a task of the run."""
    n = spec.resolution
    roster = set(roster_ids)
    named = spec.warmup_scene
    try:
        if WARMUP_SPLIT not in present_splits(root, n):
            raise WarmupSceneError(f"warmup_scene: the dataset root {root} has no {WARMUP_SPLIT} split "
                                   f"at {n}x{n}; timing_profile {spec.timing_profile} warms up on a "
                                   f"{WARMUP_SPLIT} scene outside the roster")
        if named is not None and named in roster:
            raise WarmupSceneError(f"warmup_scene: {named!r} is a task of the run (in the roster); the "
                                   f"warm-up scene must be outside it")
        for scene in iter_scenes(root, n, WARMUP_SPLIT, None, workers=2, check_unique_ids=False):
            if (scene.id == named) if named is not None else (scene.id not in roster):
                check_weight(scene, spec.cost_model, spec.cost_weight)
                return scene.task(spec.cost_model, spec.task_variant)
    except DataError as e:
        raise WarmupSceneError(f"warmup_scene: {_where(root, n)}: {e}") from None
    if named is not None:
        raise WarmupSceneError(f"warmup_scene: no scene {named!r} in {_where(root, n)}")
    raise WarmupSceneError(f"warmup_scene: every scene of {_where(root, n)} is a task of the run; a "
                           f"session needs a warm-up scene outside the roster")
