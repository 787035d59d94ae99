"""A run's timing profile and timing boundary, as scoring and compare read them from a
seed's ``manifest.json``.

* ``timing_profile`` (top level): the spec's profile, one of
  :data:`~passage_jax.contract.TIMING_PROFILES`. A manifest without it was written before
  profiles were declared and reads as :data:`~passage_jax.contract.COMPLETE_REQUEST_PROFILE`
  (or, when its ``timing.profile`` names a session profile, as that profile).
* ``timing_boundary`` (top level): the boundary the timer ran under: the executor's
  (:data:`~passage_jax.contract.IN_PROCESS_TIMING_PROFILE` or
  :data:`~passage_jax.contract.SUPERVISED_TIMING_PROFILE`) under the default profile, the
  profile's own name under a session profile. Without it: ``timing.profile``, else
  :data:`~passage_jax.contract.IN_PROCESS_TIMING_PROFILE`.
* ``timing.timer``: the runner's description of the timer (text; may be absent).

The profile is what makes two runs' latencies the same measurement (``compare`` refuses
different profiles); the boundary and the timer text are procedure limits.
"""
from __future__ import annotations

from passage_jax.contract import (
    COMPLETE_REQUEST_PROFILE,
    IN_PROCESS_TIMING_PROFILE,
    SESSION_PROFILES,
    TIMING_PROFILES,
)
from passage_jax.evaluate.score._format import ScoreError, short
from passage_jax.protocol.runfolder import MANIFEST

__all__ = ["run_timing", "recost_inside_latency"]


def _text(where, key: str, value) -> str:
    if not isinstance(value, str) or not value:
        raise ScoreError(f"{where}: field {key!r} must be a non-empty string, got {short(value)}")
    return value


def run_timing(manifest: dict, where=MANIFEST) -> dict:
    """``{"profile", "timing_boundary", "timer", "runner_format"}`` of a seed manifest
    (``where`` names it in errors): an unknown profile, or a profile or boundary that is
    not a string, is a :class:`~passage_jax.evaluate.score._format.ScoreError` naming the
    field."""
    timing = manifest.get("timing") if isinstance(manifest.get("timing"), dict) else {}
    old = timing.get("profile")
    if old is not None:
        old = _text(where, "timing.profile", old)
    if "timing_profile" in manifest:
        profile = _text(where, "timing_profile", manifest["timing_profile"])
        if profile not in TIMING_PROFILES:
            raise ScoreError(f"{where}: field 'timing_profile' must be one of "
                             f"{list(TIMING_PROFILES)}, got {short(profile)}")
    else:
        profile = old if old in SESSION_PROFILES else COMPLETE_REQUEST_PROFILE
    if "timing_boundary" in manifest:
        boundary = _text(where, "timing_boundary", manifest["timing_boundary"])
    else:
        boundary = old or IN_PROCESS_TIMING_PROFILE
    return {"profile": profile, "timing_boundary": boundary, "timer": timing.get("timer"),
            "runner_format": manifest.get("format")}


def recost_inside_latency(profile: str) -> bool:
    """Whether ``profile`` times the legality check and recosting inside ``latency_ms``
    (the default profile) or apart (the session profiles)."""
    return profile not in SESSION_PROFILES
