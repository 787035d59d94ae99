"""Options of the statistics entry points: frozen dataclasses validated once in
``__post_init__``.

Each entry point takes ``options=`` (one of these) and keyword overrides of its fields
(``paired_bootstrap(a, b, n_bootstrap=999)``); :func:`passage_jax.options.merge_options` merges
them and refuses a name that is not a field with a ``TypeError`` naming it. The value checks shared by the
stage (``alpha``, draw counts, bootstrap seeds, NaN policies, declared p-values) live here.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from passage_jax.checks import is_int, is_number, require_int
from passage_jax.contract import PRIMARY_METRICS

NAN_POLICIES = ("raise", "omit")

__all__ = ["NAN_POLICIES", "BootstrapOptions", "ResultOptions", "DrawOptions", "ComparisonOptions",
           "RandomizationOptions", "check_alpha", "check_draws", "check_seed",
           "check_nan_policy", "check_p_value", "declared_p_values"]



# ----------------------------------------------------------------------------- checks

def check_alpha(alpha) -> None:
    if not (is_number(alpha) and 0.0 < float(alpha) < 1.0):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")


def check_draws(n_bootstrap) -> None:
    if not is_int(n_bootstrap) or n_bootstrap < 1:
        raise ValueError(f"n_bootstrap must be a positive integer, got {n_bootstrap!r}")


def check_seed(seed) -> None:
    if not is_int(seed) or seed < 0:
        raise ValueError(f"bootstrap seed must be a non-negative integer, got {seed!r}")


def check_nan_policy(nan_policy) -> None:
    if nan_policy not in NAN_POLICIES:
        raise ValueError(f"nan_policy must be one of {NAN_POLICIES}, got {nan_policy!r}")


def check_p_value(name, p) -> float:
    """``p`` as a float: a number in [0, 1], or NaN (an unavailable test)."""
    if not is_number(p):
        raise ValueError(f"p-value for {name!r} must be a number in [0, 1] or NaN, got {p!r}")
    p = float(p)
    if math.isnan(p):
        return p
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p-value for {name!r} is {p}, outside [0, 1]")
    return p


def declared_p_values(p_values, paired_test, test_assumptions) -> dict | None:
    """The six primary metrics' p-values in contract order, checked with the declared test
    they need; ``None`` when none are given (then no test may be declared)."""
    if p_values is None:
        if paired_test is not None or test_assumptions is not None:
            raise ValueError("paired_test/test_assumptions given without p_values")
        return None
    if not isinstance(p_values, Mapping):
        raise ValueError("p_values must map each primary metric name to a p-value")
    keys = set(p_values)
    if keys != set(PRIMARY_METRICS):
        raise ValueError(f"p_values must name exactly the six primary metrics {list(PRIMARY_METRICS)}; "
                         f"missing {sorted(set(PRIMARY_METRICS) - keys)}, "
                         f"unknown {sorted(keys - set(PRIMARY_METRICS), key=str)}")
    if not isinstance(paired_test, str) or not paired_test.strip():
        raise ValueError("p_values need the declared paired_test (a non-empty name)")
    if test_assumptions is None or (isinstance(test_assumptions, str) and not test_assumptions.strip()):
        raise ValueError("p_values need the declared test_assumptions")
    return {m: check_p_value(m, p_values[m]) for m in PRIMARY_METRICS}


# ----------------------------------------------------------------------------- options

@dataclass(frozen=True)
class ResultOptions:
    """What a bootstrap result states besides its values: the interval level ``alpha``, the
    number of draws ``n_bootstrap`` it reports and whether it keeps the draws."""
    alpha: float
    n_bootstrap: int
    return_draws: bool


@dataclass(frozen=True)
class BootstrapOptions:
    """Options of :func:`~passage_jax.stats.paired_bootstrap` and
    :func:`~passage_jax.stats.seed_mean_bootstrap`: ``n_bootstrap`` draws of multiplicity rows
    from ``seed``, a percentile interval at ``alpha``, the ``nan_policy`` (``"raise"``, or
    ``"omit"``: each method's finite subset), whether the result keeps its draws, and where
    the draws axis goes (``sharding``: None, ``"auto"``, ``"global"`` or a
    ``jax.sharding.Sharding``; see :func:`~passage_jax.stats.draws.draw_placement`)."""
    n_bootstrap: int = 10000
    alpha: float = 0.05
    seed: int = 0
    nan_policy: str = "raise"
    return_draws: bool = False
    sharding: Any = None

    def __post_init__(self):
        check_alpha(self.alpha)
        check_draws(self.n_bootstrap)
        check_nan_policy(self.nan_policy)
        check_seed(self.seed)

    @property
    def result(self) -> ResultOptions:
        return ResultOptions(alpha=self.alpha, n_bootstrap=self.n_bootstrap, return_draws=self.return_draws)


@dataclass(frozen=True)
class DrawOptions:
    """How :func:`~passage_jax.stats.draws.resample_draws` makes its draws: the multiplicity
    rows come from ``mult`` (an (n_draws, n_blocks) matrix) when given, else from ``seed``
    (streamed in chunks); ``chunk`` draws per kernel call (None: sized to bound the working
    set); ``segment`` of the order-statistic search (``"auto"``, None for one cumulative sum,
    or a length); ``sharding`` places the draws axis."""
    seed: int | None = None
    mult: Any = field(default=None, compare=False, repr=False)
    chunk: int | None = None
    segment: int | str | None = "auto"
    sharding: Any = None

    def __post_init__(self):
        seg = self.segment
        if not (seg is None or seg == "auto" or (is_int(seg) and seg >= 1)):
            raise ValueError(f"segment must be 'auto', None or a positive integer, got {self.segment!r}")
        if self.mult is not None:
            object.__setattr__(self, "mult", np.asarray(self.mult))


@dataclass(frozen=True)
class ComparisonOptions:
    """Options of :func:`~passage_jax.stats.compare_primary_metrics`: the bootstrap
    (``n_bootstrap``, ``alpha``, ``seed``, ``return_draws``, ``sharding``), the declared test
    (``p_values`` for the six primary metrics with ``paired_test`` and ``test_assumptions``;
    kept in contract order) and the roster ``task_ids`` the records must carry."""
    n_bootstrap: int = 10000
    alpha: float = 0.05
    seed: int = 0
    p_values: Mapping[str, float] | None = None
    paired_test: str | None = None
    test_assumptions: Any = None
    task_ids: Sequence[str] | None = None
    return_draws: bool = False
    sharding: Any = None

    def __post_init__(self):
        check_alpha(self.alpha)
        check_draws(self.n_bootstrap)
        if not is_int(self.seed):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        check_seed(self.seed)
        object.__setattr__(self, "p_values",
                           declared_p_values(self.p_values, self.paired_test, self.test_assumptions))

    @property
    def result(self) -> ResultOptions:
        return ResultOptions(alpha=self.alpha, n_bootstrap=self.n_bootstrap, return_draws=self.return_draws)


@dataclass(frozen=True)
class RandomizationOptions:
    """Options of :func:`~passage_jax.stats.block_randomization_test`: every swap pattern up to
    ``exact_limit`` blocks, else ``n_random`` patterns drawn from ``seed``; ``chunk`` patterns
    per kernel call (None: sized automatically) and ``sharding`` of the patterns axis."""
    exact_limit: int = 12
    n_random: int = 9999
    seed: int = 0
    chunk: int | None = None
    sharding: Any = None

    def __post_init__(self):
        object.__setattr__(self, "n_random", require_int(self.n_random, "n_random", low=1))
        object.__setattr__(self, "exact_limit", require_int(self.exact_limit, "exact_limit", low=0))
