"""A comparison file read back re-derived, not trusted (:func:`verify_comparison`).

``report`` and ``leaderboard`` show what a comparison file says of its runs: their method
names, seeds and folders, the setting they share (data, cost model, tasks, references,
timing profile), their limits and protocols, and each seed's figures. A comparison file is
a plain JSON file anyone can edit, so each of these is compared with what the runs it names
give when they are read again: the runs are loaded as ``compare`` loads them (each seed's
score verified against its receipt, its ``metrics.json`` against its ``per_sample.npz``:
:mod:`~passage_jax.evaluate.score._verify`), checked and paired again, and the blocks the
comparison restates (:data:`~passage_jax.evaluate.compare.RESTATED`) must be the ones
:func:`~passage_jax.evaluate.compare.restated` gives. Every number of the file is finite and
in its domain (:func:`~passage_jax.evaluate.score._verify.check_numbers`, applied by the
reader, :func:`~passage_jax.evaluate.report._input.read_comparison`). The contrasts
themselves, drawn by the bootstrap, are not drawn again.
"""
from __future__ import annotations

from passage_jax.evaluate.compare._checks import check_runs, load_side, split_role_of
from passage_jax.evaluate.compare._errors import CompareError
from passage_jax.evaluate.compare._options import CompareOptions
from passage_jax.evaluate.compare._pairing import paired_rows
from passage_jax.evaluate.compare._pipeline import restated
from passage_jax.evaluate.score import Partial, ScoreError, difference_text, first_difference
from passage_jax.options import merge_options

__all__ = ["verify_comparison"]


def _flag(cmp: dict, block: str, key: str) -> bool:
    v = cmp.get(block)
    return isinstance(v, dict) and v.get(key) is True


def verify_comparison(cmp: dict, where, error) -> None:
    """The comparison file ``cmp`` (read from ``where``; its runs' ``path`` fields already
    checked to be strings, its numbers by
    :func:`~passage_jax.evaluate.score._verify.check_numbers`) checked: every block it
    restates against its runs read again; ``error`` naming the file and the field otherwise."""
    sides = {}
    for n in ("A", "B"):
        path = cmp["runs"][n]["path"]
        try:
            sides[n] = load_side(path)
        except CompareError as e:
            raise error(f"{where}: field 'runs.{n}.path' names {path!r}, which cannot be read "
                        f"back as a scored run: {e}") from None
    options = merge_options(CompareOptions, None, {
        "allow_precision_mix": _flag(cmp, "reference_precision", "mixed"),
        "allow_noncanonical": _flag(cmp, "inference_protocols", "allow_noncanonical"),
        "require_identical_limits": _flag(cmp, "procedure_limits", "required_identical")},
        "verify_comparison")
    try:
        checks = check_runs(sides["A"], sides["B"], options)
        rows = paired_rows(sides["A"], sides["B"])
        roles = {n: split_role_of(s) for n, s in sides.items()}
    except (CompareError, ScoreError) as e:
        raise error(f"{where}: the runs it names are not comparable as they are now: {e}") from None
    want = restated(sides, checks, roles, rows)
    diff = first_difference(cmp, Partial({k: v for k, v in want.items() if k in cmp}))
    if diff is not None:
        raise error(f"{where}: {difference_text(diff, 'the runs it names give')}; a comparison file "
                    f"must state its runs as they are (compare them again)")
