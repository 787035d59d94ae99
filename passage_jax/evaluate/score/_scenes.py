"""Reloading a run's scenes for scoring (part of the read stage): from the dataset the
run's manifest records (:func:`dataset_root`), every shard and task checked against what
the run recorded (:func:`open_run_tasks`). The planner never runs again; only the scenes'
elevation and obstacles are used."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from passage_jax.checks import is_int
from passage_jax.data import DataError, open_tasks, resolve_dataset_root, scenes_at, shipped_cohort_root
from passage_jax.evaluate.score._format import DatasetNotFound, ScoreError, short
from passage_jax.fileio import check_sha256
from passage_jax.protocol.records import code_hash, input_hash, package_versions

__all__ = ["dataset_root", "open_run_tasks", "chosen_run_tasks", "reload_tasks", "check_data_fields",
           "task_input_hash", "ChunkCheck", "input_check", "INPUT_CHECKS", "DECODE_PACKAGES"]

#: how the reloaded tasks are vouched for: ``"hash"``, each task's input hash computed
#: and compared with the one the run recorded at admission; ``"provenance"``, the run was
#: admitted by this very evaluator (same source hash, same decoding packages), so with its
#: shards' sha256 checked the decoded tasks are the admitted ones bit for bit and their
#: hashes could only repeat the recorded ones (:func:`input_check`)
INPUT_CHECKS = ("hash", "provenance")

#: the packages that turn a shard's bytes into a task's arrays (Parquet, the Zstandard
#: frame, the float32 -> float64 metres); with the evaluator's own source they decide them
DECODE_PACKAGES = ("numpy", "pyarrow", "zstandard")

#: the manifest's ``data`` fields that reloading the scenes needs
_DATA_KEYS = ("resolution", "split", "cost_model", "task_variant", "shards", "sample_ids")


def _candidate_root(c) -> Path:
    """A dataset root as given: ``"shipped"`` names the cohort shipped in the package
    (:func:`passage_jax.data.shipped_cohort_root`), as in a run spec's ``dataset_path``."""
    return shipped_cohort_root() if str(c) == "shipped" else Path(c).expanduser()


def dataset_root(manifest: dict, override=None) -> Path:
    """The dataset root to reload the scenes from: ``override`` when given, else the
    run's recorded root, else its ``dataset_path`` (``"shipped"`` resolved), else the
    run's pinned hub snapshot; :class:`DatasetNotFound` when none is there."""
    data = manifest.get("data") or {}
    cands = [override] if override is not None else [data.get("dataset_root"),
                                                     data.get("dataset_path")]
    for c in cands:
        if c and isinstance(c, (str, Path)) and _candidate_root(c).is_dir():
            return _candidate_root(c)
    if override is None and data.get("dataset_repo") and data.get("dataset_revision"):
        # a hub run: the pinned snapshot, fetched (or found in the cache) for its split only
        try:
            return resolve_dataset_root(dataset_repo=data["dataset_repo"],
                                        dataset_revision=data["dataset_revision"],
                                        resolution=int(data["resolution"]), split=str(data["split"]))
        except DataError as e:
            raise DatasetNotFound(f"dataset of the run not found locally, and the hub snapshot "
                                  f"failed: {e}") from None
    raise DatasetNotFound(f"dataset of the run not found (tried {[c for c in cands if c]}); "
                          f"a copy elsewhere can be named (its hashes are checked)")


def check_data_fields(data: dict, where: str) -> None:
    """The manifest's ``data`` fields that reloading the scenes reads, of their types."""
    kinds = {"resolution": (is_int, "an integer"), "split": (lambda v: isinstance(v, str), "a string"),
             "cost_model": (lambda v: isinstance(v, str), "a string"),
             "task_variant": (lambda v: isinstance(v, str), "a string"),
             "n_samples": (lambda v: v is None or is_int(v), "an integer or null"),
             "sample_ids": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
                            "a list of strings"),
             "shards": (lambda v: isinstance(v, list) and all(
                 isinstance(x, dict) and isinstance(x.get("name"), str) and isinstance(x.get("sha256"), str)
                 for x in v), "a list of {name, sha256} objects")}
    for k, (ok, what) in kinds.items():
        if k in data and not ok(data[k]):
            raise ScoreError(f"{where}: manifest data.{k} must be {what}, got {short(data[k])}")


def input_check(manifest: dict, requested: str | None = None) -> str:
    """Which of :data:`INPUT_CHECKS` a score makes of the run's reloaded tasks:
    ``requested`` when given (``"hash"`` always allowed; ``"provenance"`` only where it
    holds), else ``"provenance"`` when the run's manifest records this evaluator's source
    hash (``code.sha256``) and this process's versions of :data:`DECODE_PACKAGES`, and
    ``"hash"`` otherwise. The shards' sha256 and each task's id, shard, objective,
    variant and weight are checked either way."""
    if requested not in (None, *INPUT_CHECKS):
        raise ValueError(f"input check must be one of {list(INPUT_CHECKS)}, got {requested!r}")
    if requested == "hash":
        return "hash"
    code = manifest.get("code") if isinstance(manifest, dict) else None
    versions = manifest.get("versions") if isinstance(manifest, dict) else None
    same = (isinstance(code, dict) and code.get("sha256") == code_hash()["sha256"]
            and isinstance(versions, dict)
            and all(versions.get(k) == v for k, v in package_versions().items()
                    if k in DECODE_PACKAGES))
    if requested == "provenance" and not same:
        raise ScoreError("the provenance input check needs a run admitted by this evaluator "
                         "(its manifest's code.sha256 and versions of "
                         f"{', '.join(DECODE_PACKAGES)}); this run's differ: check by hash")
    return "provenance" if same else "hash"


def task_input_hash(task) -> str:
    """The input hash of a reloaded task, to compare with the one the run recorded at
    admission (the one place scoring computes it)."""
    return input_hash(task)


def _ref(refs, key: str):
    """A field of the run's references: a :class:`~passage_jax.evaluate.score._records.References`
    or a mapping with the same keys."""
    return refs[key] if isinstance(refs, Mapping) else getattr(refs, key)


class ChunkCheck:
    """Checks each chunk of reloaded tasks against the run (id, shard among the run's
    ``shard_names``, input hash unless ``hashes`` is False, objective, variant, weight),
    then hands it to ``on_chunk``."""

    def __init__(self, refs, run_ids: list, shard_names, where: str, on_chunk,
                 hashes: bool = True):
        self.run_ids, self.shard_names, self.where, self.on_chunk = run_ids, shard_names, where, on_chunk
        self.hashes = hashes
        self.input_sha256 = _ref(refs, "input_sha256")
        self.objective, self.variant = _ref(refs, "objective"), _ref(refs, "variant")
        self.cost_weight = _ref(refs, "cost_weight")

    def __call__(self, first: int, tasks) -> None:
        self.check(first, tasks)
        if self.on_chunk is not None:
            self.on_chunk(first, tasks)

    def check(self, first: int, tasks) -> None:
        """The chunk of ``tasks`` that starts at task ``first``, checked against the run
        (``shard_names`` None: the shards were checked by another seed's read)."""
        where, run_ids = self.where, self.run_ids
        for i, t in enumerate(tasks, start=first):
            if i >= len(run_ids) or t.id != run_ids[i]:
                raise ScoreError(f"{where}: reloaded scene {i} is {t.id}, the run's is "
                                 f"{run_ids[i] if i < len(run_ids) else 'absent'}")
            if self.shard_names is not None and Path(t.scene.file).name not in self.shard_names:
                raise ScoreError(f"{where}: scene {t.id} comes from {t.scene.file}, a shard the "
                                 f"run did not record")
            got = task_input_hash(t) if self.hashes else None  # as recorded at admission
            if self.hashes and got != self.input_sha256[i]:
                raise ScoreError(f"{where}: task {i} (scene {t.id}): input hash {got} differs "
                                 f"from the run's {self.input_sha256[i]}")
            if (t.objective != self.objective[i] or t.variant != self.variant[i]
                    or float(t.weight) != float(self.cost_weight[i])):
                raise ScoreError(f"{where}: task {i} (scene {t.id}): objective/variant/weight "
                                 f"differ from the run's references")


def _run_data(manifest: dict, where: str) -> dict:
    """The manifest's ``data`` block, its required fields present and well formed."""
    data = manifest.get("data") or {}
    if not isinstance(data, dict):
        raise ScoreError(f"{where}: manifest field 'data' must be an object, got {type(data).__name__}")
    for k in _DATA_KEYS:
        if k not in data:
            raise ScoreError(f"{where}: manifest data.{k} is missing")
    check_data_fields(data, where)
    return data


def _run_ids(data: dict, refs, where: str) -> list:
    """The run's scene ids, which must be its references' (in order)."""
    run_ids, ref_ids = list(data["sample_ids"]), list(_ref(refs, "sample_id"))
    if run_ids != ref_ids:
        raise ScoreError(f"{where}: the manifest's scene ids {run_ids[:3]}... differ from the "
                         f"references' {ref_ids[:3]}...")
    return run_ids


def open_run_tasks(manifest: dict, refs, where: str, dataset_path=None, on_chunk=None, *,
                   chunk: int | None = None, on_read=None, check: str = "hash") -> tuple:
    """The run's tasks as a :class:`~passage_jax.data.TaskStream`, read once in chunks and
    checked against the run (shard hashes; per task: id, input hash, objective, variant,
    weight); ``on_chunk(first, tasks)`` is called for each checked chunk during that read,
    ``on_read(index, task)`` on the reading thread as each task is read (unchecked yet).
    ``check`` (:data:`INPUT_CHECKS`, decided by :func:`input_check`): ``"provenance"``
    takes no input hashes (the stream is then read once only).
    ``refs`` is the run's :class:`~passage_jax.evaluate.score._records.References` (or a mapping
    of ``sample_id``, ``input_sha256``, ``objective``, ``variant``, ``cost_weight``).
    Returns (tasks, root, shard hashes)."""
    data = _run_data(manifest, where)
    root = dataset_root(manifest, dataset_path)
    res, split = int(data["resolution"]), str(data["split"])
    shards = _ShardCheck(root / f"{res}x{res}" / split, data["shards"], where)
    run_ids = _run_ids(data, refs, where)
    if check not in INPUT_CHECKS:
        raise ValueError(f"check must be one of {list(INPUT_CHECKS)}, got {check!r}")
    hashes = check == "hash"
    chunk_check = ChunkCheck(refs, run_ids, shards.recorded, where, on_chunk, hashes)
    try:
        tasks = open_tasks(root, res, split, data["cost_model"], data["task_variant"],
                           n_samples=data.get("n_samples"), chunk=chunk, on_chunk=chunk_check,
                           on_read=on_read, hash_inputs=hashes, on_shard=shards,
                           released_routes=False)  # the shards' bytes are the admitted ones
    except (DataError, ValueError) as e:
        raise ScoreError(f"{where}: reloading the scenes failed: {e}") from None
    shard_hashes = shards.all_checked()
    if tasks.ids != run_ids:
        raise ScoreError(f"{where}: reloaded {len(tasks)} scenes, the run has {len(run_ids)}")
    return tasks, root, shard_hashes


class _ShardCheck:
    """The run's recorded shards (``recorded``: [{name, sha256}], in ``folder``), each
    checked against its sha256 just before the read opens it (an ``on_shard`` hook of
    :func:`~passage_jax.data.open_tasks`: on the reading thread, so hashing a shard
    overlaps with decoding the one before, and no row of a shard is decoded before its
    bytes are found to be the admitted ones). Every recorded shard must exist before the
    read starts; one the read did not reach is checked at the end (:meth:`all_checked`)."""

    def __init__(self, folder: Path, recorded: list, where: str):
        self.folder, self.where = folder, where
        self.sha256 = {s["name"]: s["sha256"] for s in recorded}
        self.checked: dict[str, str] = {}
        for name in self.sha256:  # a missing shard is refused before anything is read
            if not (folder / name).is_file():
                self._check(name)

    @property
    def recorded(self) -> frozenset:
        return frozenset(self.sha256)

    def _check(self, name: str) -> str:
        return check_sha256(self.folder / name, self.sha256[name], ScoreError,
                            what=f"{self.where}: shard", recorded_by="the run",
                            remedy="; the data changed since the run")

    def __call__(self, path) -> None:
        name = Path(path).name
        if name in self.sha256 and name not in self.checked:  # another is named by its scenes
            self.checked[name] = self._check(name)

    def all_checked(self) -> dict[str, str]:
        """{name: sha256} of every recorded shard, in the run's order."""
        return {name: self.checked.get(name) or self._check(name) for name in self.sha256}


def chosen_run_tasks(manifest: dict, refs, indices, where: str, dataset_path=None) -> dict:
    """The run's tasks at ``indices`` (positions in its task order), only their scenes
    decoded (:func:`passage_jax.data.scenes_at`): for a figure of a few tasks of a large
    run. Each is checked against the run: its id and its input hash must be the recorded
    ones (so what is drawn is what the run's planner was given); ScoreError naming the
    scene otherwise. ``refs`` as in :func:`open_run_tasks` (its ``sample_id`` and
    ``input_sha256``)."""
    data = _run_data(manifest, where)
    ids, hashes = _run_ids(data, refs, where), list(_ref(refs, "input_sha256"))
    bad = [i for i in indices if not 0 <= int(i) < len(ids)]
    if bad:
        raise ScoreError(f"{where}: task {bad[0]} asked for; the run has {len(ids)}")
    res, split = int(data["resolution"]), str(data["split"])
    try:
        scenes = scenes_at(dataset_root(manifest, dataset_path), res, split, indices,
                           data.get("n_samples"), released_routes=False)
    except DataError as e:
        raise ScoreError(f"{where}: reloading the scenes failed: {e}") from None
    out = {}
    for i, scene in scenes.items():
        task = scene.task(data["cost_model"], data["task_variant"])
        if task.id != ids[i] or task_input_hash(task) != hashes[i]:
            raise ScoreError(f"{where}: {scene.where} is not the run's task {i} ({ids[i]}, input "
                             f"hash {hashes[i][:12]}...): the data changed since the run")
        out[i] = task
    return out


def reload_tasks(manifest: dict, refs, where: str, dataset_path=None) -> tuple:
    """Every task of the run in memory, reloaded and checked; returns (tasks, root, shard
    hashes). Scoring streams them (:func:`open_run_tasks`); a few of them (a figure's) come
    from :func:`chosen_run_tasks`, which decodes only those."""
    tasks, root, shard_hashes = open_run_tasks(manifest, refs, where, dataset_path)
    return list(tasks), root, shard_hashes
