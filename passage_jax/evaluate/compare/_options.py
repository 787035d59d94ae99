"""The options of :func:`~passage_jax.evaluate.compare_runs`, validated once.

``compare_runs(a, b, output, options=CompareOptions(...))`` or, as before, keyword
overrides of the fields (``compare_runs(a, b, output, n_bootstrap=2000)``); a name that is
not a field is a ``TypeError`` naming it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from passage_jax.checks import is_int
from passage_jax.evaluate.compare._errors import InvalidResamples, RosterHashMissing, TestEvidenceError
from passage_jax.evaluate.compare._pairing import Draws

__all__ = ["CompareOptions", "DEFAULT_RESAMPLES", "PAIRED_TESTS"]

DEFAULT_RESAMPLES = 10000
#: paired tests ``compare_runs`` can run itself (``paired_test=``)
PAIRED_TESTS = ("randomization",)


@dataclass(frozen=True)
class CompareOptions:
    """How two runs are compared.

    ``n_bootstrap`` block-bootstrap draws from ``bootstrap_seed`` with intervals at
    ``alpha``; ``roster`` (with its sealed ``roster_sha256``) for the blocks instead of the
    tiles; ``odd_spec``: a file of ODD bins; ``require_identical_limits`` also refuses runs
    whose budgets, timing series or deadlines differ; ``force`` replaces an existing output
    file; ``shard_draws`` splits the draws over all local devices (results do not depend on
    it); ``allow_noncanonical`` pairs a canonical-protocol run with a noncanonical one;
    ``allow_precision_mix`` pairs runs whose references came from different arithmetic
    paths. The confirmatory test: ``paired_test="randomization"`` (``randomization_draws``
    random swap patterns when the blocks are too many to enumerate) or a ``test_evidence``
    file, not both.
    """
    n_bootstrap: int = DEFAULT_RESAMPLES
    alpha: float = 0.05
    bootstrap_seed: int = 0
    roster: Any = None
    roster_sha256: str | None = None
    odd_spec: Any = None
    require_identical_limits: bool = False
    force: bool = False
    shard_draws: bool = False
    allow_noncanonical: bool = False
    paired_test: str | None = None
    test_evidence: Any = None
    randomization_draws: int = 9999
    allow_precision_mix: bool = False

    def __post_init__(self):
        if not is_int(self.n_bootstrap) or self.n_bootstrap < 1:
            raise InvalidResamples(f"the number of bootstrap resamples must be a positive integer, "
                                   f"got {self.n_bootstrap!r}")
        if self.roster_sha256 is not None and self.roster is None:
            raise RosterHashMissing("a roster sha256 is given without a roster")
        if self.paired_test is not None and self.test_evidence is not None:
            raise TestEvidenceError("give either a paired test to run or a test evidence file, not both")
        if self.paired_test is not None and self.paired_test not in PAIRED_TESTS:
            raise TestEvidenceError(f"unknown paired test {self.paired_test!r}; choose one of "
                                    f"{list(PAIRED_TESTS)} or supply a test evidence file")
        if not is_int(self.randomization_draws) or self.randomization_draws < 1:
            raise TestEvidenceError(f"the number of randomization draws must be a positive integer, "
                                    f"got {self.randomization_draws!r}")
        object.__setattr__(self, "n_bootstrap", int(self.n_bootstrap))
        object.__setattr__(self, "randomization_draws", int(self.randomization_draws))

    @property
    def sharding(self) -> str | None:
        """Where the draws axis goes: every local device with ``shard_draws``."""
        return "auto" if self.shard_draws else None

    @property
    def draws(self) -> Draws:
        """The bootstrap every contrast shares."""
        return Draws(n=self.n_bootstrap, alpha=float(self.alpha), seed=int(self.bootstrap_seed),
                     sharding=self.sharding)

    @property
    def wants_test(self) -> bool:
        """Whether a confirmatory test is asked for (run here, or from an evidence file)."""
        return self.paired_test is not None or self.test_evidence is not None

