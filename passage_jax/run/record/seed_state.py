"""The state of one seed folder (``seed_state.json``): when the seed started, every
planner build, every resume and every repair of its final files.

:class:`SeedState` is immutable: each transition (:meth:`SeedState.with_build`,
:meth:`SeedState.with_build_finished`, :meth:`SeedState.with_resume`,
:meth:`SeedState.with_repair`) returns a new state, and :func:`save_state` is the one
place that writes the file. The manifest's ``resume`` block is built from it.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from passage_jax.fileio import atomic_write_json, read_document, utc_now
from passage_jax.protocol.runfolder import SEED_STATE
from passage_jax.run.errors import ResumeError

__all__ = ["SEED_STATE_FORMAT", "Build", "SeedState", "load_state", "save_state"]

#: per-seed state: start time, planner builds, resumes and repairs
SEED_STATE_FORMAT = "passage-jax-seed-state-v1"

_BUILD_KEYS = ("utc", "at_record", "construction_ms", "planner_name", "profile", "timer")
#: what a build records when its requests are done (absent while it runs); ``session`` (a
#: session timing profile's session entry) is recorded after the session's warm-up and
#: again, brought up to date, when its requests are done
_FINISHED_KEYS = ("executor_stats", "compilation", "working_directory_restored", "session",
                  "requests_wall_ms")


@dataclasses.dataclass(frozen=True)
class Build:
    """One construction of the planner: when, at which record, how long it took, what it
    is; once its requests are done, what the executor saw (``executor_stats``), what it
    compiled in the run's process (``compilation``) and, when the planner changed the
    working directory, how it was restored (``working_directory_restored``). Under a
    session timing profile ``session`` is the build's session entry (the manifest's
    ``session.sessions``). ``requests_wall_ms``: the wall time of its requests, from the
    first one's preparation to the last record handed to the journal (the evaluator's own
    time per request is this over the requests, less their mean ``latency_ms``)."""

    utc: str
    at_record: int
    construction_ms: float | None
    planner_name: str | None
    profile: str | None
    timer: str | None
    executor_stats: dict | None = None
    compilation: dict | None = None
    working_directory_restored: dict | None = None
    session: dict | None = None
    requests_wall_ms: float | None = None

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in _BUILD_KEYS}
        d.update({k: getattr(self, k) for k in _FINISHED_KEYS if getattr(self, k) is not None})
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Build:
        return cls(**{k: d.get(k) for k in (*_BUILD_KEYS, *_FINISHED_KEYS)})


@dataclasses.dataclass(frozen=True)
class SeedState:
    """What ``seed_state.json`` holds. ``resumes`` entries are ``{utc, recovered_records,
    dropped_torn_bytes, torn}``, ``repairs`` entries ``{utc, problems}``."""

    seed: int
    started_utc: str | None
    builds: tuple[Build, ...] = ()
    resumes: tuple[dict, ...] = ()
    repairs: tuple[dict, ...] = ()

    @classmethod
    def new(cls, seed: int) -> SeedState:
        return cls(seed=int(seed), started_utc=utc_now())

    @property
    def first_build(self) -> Build | None:
        return self.builds[0] if self.builds else None

    @property
    def sessions(self) -> list[dict]:
        """The session entries of the builds, in build order (session timing profiles)."""
        return [b.session for b in self.builds if b.session is not None]

    def with_build(self, build: Build) -> SeedState:
        return dataclasses.replace(self, builds=(*self.builds, build))

    def with_build_finished(self, executor_stats: dict, compilation: dict,
                            working_directory_restored: dict | None = None,
                            session: dict | None = None,
                            requests_wall_ms: float | None = None) -> SeedState:
        """The last build, its requests done (``session``: its session entry brought up to
        date; None keeps the one recorded)."""
        last = self.builds[-1]
        last = dataclasses.replace(last, executor_stats=executor_stats, compilation=compilation,
                                   working_directory_restored=working_directory_restored,
                                   session=last.session if session is None else session,
                                   requests_wall_ms=requests_wall_ms)
        return dataclasses.replace(self, builds=(*self.builds[:-1], last))

    def with_resume(self, recovered_records: int, dropped_torn_bytes: int, torn) -> SeedState:
        entry = {"utc": utc_now(), "recovered_records": recovered_records,
                 "dropped_torn_bytes": dropped_torn_bytes, "torn": torn}
        return dataclasses.replace(self, resumes=(*self.resumes, entry))

    def with_repair(self, problems: list[str]) -> SeedState:
        entry = {"utc": utc_now(), "problems": list(problems)}
        return dataclasses.replace(self, repairs=(*self.repairs, entry))

    def to_dict(self) -> dict:
        return {"format": SEED_STATE_FORMAT, "seed": self.seed, "started_utc": self.started_utc,
                "builds": [b.to_dict() for b in self.builds], "resumes": list(self.resumes),
                "repairs": list(self.repairs)}

    @classmethod
    def from_dict(cls, d: dict, seed: int) -> SeedState:
        """The state ``d`` holds (``seed`` where it names none)."""
        return cls(seed=int(d.get("seed", seed)), started_utc=d.get("started_utc"),
                   builds=tuple(Build.from_dict(b) for b in d.get("builds", ())),
                   resumes=tuple(d.get("resumes", ())), repairs=tuple(d.get("repairs", ())))


def load_state(folder: Path, seed: int) -> SeedState | None:
    """The state stored in ``folder``, or None when there is none or it is unreadable (it is
    written atomically: unreadable only when damaged; the seed starts its state anew)."""
    path = Path(folder) / SEED_STATE
    if not path.exists():
        return None
    try:
        doc = read_document(path, ResumeError, "seed state")
    except ResumeError:
        return None
    if not isinstance(doc, dict) or doc.get("format") != SEED_STATE_FORMAT:
        return None
    return SeedState.from_dict(doc, seed)


def save_state(folder: Path, state: SeedState) -> SeedState:
    """Write ``state`` to ``folder/seed_state.json`` (atomically); returns it."""
    atomic_write_json(Path(folder) / SEED_STATE, state.to_dict())
    return state
