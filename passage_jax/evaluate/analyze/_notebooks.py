"""Analysis notebooks: parameterise the templates of ``notebooks/`` for each
resolution of a dataset, execute them, and record what ran.

Four templates per resolution (:data:`TEMPLATES`): ``_dataset.ipynb``, ``_display.ipynb``,
``_metrics.ipynb`` and ``_passage_eval_metrics.ipynb``. :func:`analyze` writes them into
``<staging_root>/<N>x<N>/`` without the leading underscore, with the cell tagged
``parameters`` replaced by the values for that resolution; with ``execute=True`` it runs
each one with nbclient on the ``python3`` kernel of this interpreter (working directory:
the resolution's staging folder) and writes the executed notebook in place.

The export also holds the source notebooks (``<staging_root>/source_notebooks/``, copies
of the templates, :func:`copy_source_notebooks`) and a read-only snapshot of the analysed
shards (``<staging_root>/data/<N>x<N>/<split>/``, :func:`stage_shards`), which the
notebooks read: each shard is hardlinked, else reflinked; when neither is possible the
analysis is refused (:class:`StagingRefused`) unless an ordinary copy was asked for
(``copy=True``, ``--copy``). The dataset is never copied silently.

``<staging_root>/analysis_manifest.json`` (:data:`ANALYSIS_FORMAT`) records, per notebook,
the template's sha256, readiness, execution status (``executed``, ``failed`` or
``not_executed``), seconds and, for a failure, the cell index and error; and once for the
analysis the identities of the data (dataset root, sha256 of every shard of each
resolution) and of the evaluator (:func:`passage_jax.protocol.records.code_hash`, package
versions, the kernel's command line); and three states kept apart (:func:`export_states`):
``notebooks`` (readiness and execution), ``parquet_staging`` (method hardlink, reflink,
copy or mixed; read-only; verified) and ``publication`` (admitted, or not with the reasons).

nbformat, nbclient and ipykernel are the ``analyze`` extra
(``pip install -e '.[analyze]'``); :class:`MissingDependency` names a missing one.
"""
from __future__ import annotations

import copy
import importlib  # noqa: F401 (the module the notebook packages are imported through)
import json
import sys
import time
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from passage_jax.data import DataError, present_splits, resolve_dataset_root, shard_files
from passage_jax.evaluate.analyze._export import (
    DATA_FOLDER,
    SOURCES_FOLDER,
    AnalyzeError,
    StagingExists,
    _clear_export,
    _require,
    copy_source_notebooks,
    export_states,
    stage_shards,
)
from passage_jax.fileio import atomic_write_json, atomic_write_text, sha256_file, utc_now
from passage_jax.options import merge_options
from passage_jax.protocol.records import code_hash, package_versions

__all__ = [
    "ANALYSIS_FORMAT", "TEMPLATES", "MANIFEST_NAME", "NOTEBOOK_PACKAGES", "KERNEL_NAME",
    "analyze_notebooks", "default_template_dir", "parameters_source", "parameterise",
    "execute_notebook", "data_identity", "evaluator_identity", "resolution_folder_name",
    "AnalyzeOptions", "AnalysisPlan", "PreparedNotebook", "plan_analysis",
]

ANALYSIS_FORMAT = "passage-jax-analysis-v1"
#: template stems, in execution order (files ``_<stem>.ipynb``)
TEMPLATES = ("dataset", "display", "metrics", "passage_eval_metrics")
MANIFEST_NAME = "analysis_manifest.json"
#: the ``analyze`` extra
NOTEBOOK_PACKAGES = ("nbformat", "nbclient", "ipykernel")
KERNEL_NAME = "python3"
#: execution timeout of one cell, seconds
DEFAULT_CELL_TIMEOUT = 1800


def default_template_dir() -> Path:
    """``notebooks/`` of the source tree this package is installed from (editable install)."""
    return Path(__file__).resolve().parents[3] / "notebooks"


def resolution_folder_name(resolution: int) -> str:
    return f"{int(resolution)}x{int(resolution)}"


def parameters_source(params: dict) -> str:
    """The source of a parameters cell: one ``name = repr(value)`` line per parameter.
    Values must be literals (str, int, float, bool, None, lists/dicts of those) that
    ``repr`` writes back exactly."""
    lines = ["# Parameters (replaced by `python -m cli analyze` for each resolution)"]
    for name, value in params.items():
        if not name.isidentifier():
            raise AnalyzeError(f"parameter name {name!r} is not a Python identifier")
        text = repr(value)
        try:
            same = json.dumps(eval(text, {"__builtins__": {}}), sort_keys=True) == json.dumps(
                value, sort_keys=True)  # noqa: S307 (literal round trip check)
        except Exception:  # noqa: BLE001 (any failure means: not a plain literal)
            same = False
        if not same:
            raise AnalyzeError(f"parameter {name}={value!r} is not a plain literal")
        lines.append(f"{name} = {text}")
    return "\n".join(lines) + "\n"


def _parameters_index(nb, where: str) -> int:
    hits = [i for i, c in enumerate(nb.cells)
            if c.cell_type == "code" and "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(hits) != 1:
        raise AnalyzeError(f"{where}: expected exactly one code cell tagged 'parameters', found {len(hits)}")
    return hits[0]


def parameterise(template, params: dict):
    """A copy of notebook ``template`` (a path or an nbformat node) whose ``parameters``
    cell sets every template parameter; ``params`` may only name parameters the template
    declares (AnalyzeError otherwise), the others keep the template's values."""
    nbformat = _require("nbformat")
    where = str(template) if isinstance(template, (str, Path)) else "notebook"
    nb = nbformat.read(str(template), as_version=4) if isinstance(template, (str, Path)) \
        else copy.deepcopy(template)
    i = _parameters_index(nb, where)
    declared: dict = {}
    try:
        exec(nb.cells[i].source, {"__builtins__": {}}, declared)  # noqa: S102 (literal assignments)
    except Exception as e:  # noqa: BLE001
        raise AnalyzeError(f"{where}: the parameters cell must hold literal assignments only: {e}") from None
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise AnalyzeError(f"{where}: unknown parameter(s) {unknown}; the template declares "
                           f"{sorted(declared)}")
    merged = {k: params.get(k, v) for k, v in declared.items()}
    nb.cells[i].source = parameters_source(merged)
    nb.cells[i].outputs = []
    nb.cells[i].execution_count = None
    nb.cells[i].metadata["tags"] = ["parameters", "injected-parameters"]
    return nb


def _kernel_manager():
    """A ``python3`` kernel manager whose kernel runs this interpreter."""
    _require("ipykernel")
    manager = _require("jupyter_client.manager")
    km = manager.KernelManager(kernel_name=KERNEL_NAME)
    spec = km.kernel_spec
    spec.argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    return km


def execute_notebook(nb, cwd, *, timeout: float = DEFAULT_CELL_TIMEOUT) -> dict:
    """Execute ``nb`` (an nbformat node, modified in place) cell by cell in ``cwd``.

    Returns ``{"status": "executed"|"failed", "seconds", "error"}``; ``error`` is None or
    ``{"cell_index", "ename", "evalue", "source_head"}`` for the first failing cell
    (index into ``nb.cells``, 0-based); execution stops there.
    """
    nbclient = _require("nbclient")
    exceptions = _require("nbclient.exceptions")
    km = _kernel_manager()
    client = nbclient.NotebookClient(nb, km=km, timeout=timeout, kernel_name=KERNEL_NAME,
                                     resources={"metadata": {"path": str(cwd)}})
    t0 = time.perf_counter()
    try:
        error = _run_cells(client, nb, exceptions)
    finally:
        if km.has_kernel:
            km.shutdown_kernel(now=True)
        km.cleanup_resources()
    return {"status": "failed" if error else "executed",
            "seconds": round(time.perf_counter() - t0, 3), "error": error}


def _run_cells(client, nb, exceptions) -> dict | None:
    error = None
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            try:
                client.execute_cell(cell, index)
            except exceptions.CellExecutionError as e:
                error = {"cell_index": index, "ename": e.ename, "evalue": e.evalue,
                         "source_head": cell.source.splitlines()[0] if cell.source else ""}
                break
            except exceptions.CellTimeoutError as e:
                error = {"cell_index": index, "ename": "CellTimeoutError", "evalue": str(e),
                         "source_head": cell.source.splitlines()[0] if cell.source else ""}
                break
    return error


def data_identity(root, resolution: int) -> dict:
    """sha256 of every shard of ``resolution`` under ``root`` (split -> file list)."""
    root = Path(root)
    splits = {}
    for split in present_splits(root, resolution):
        splits[split] = [{"path": p.relative_to(root).as_posix(), "sha256": sha256_file(p),
                          "bytes": p.stat().st_size} for p in shard_files(root, resolution, split)]
    return {"resolution": int(resolution), "splits": splits}


def evaluator_identity() -> dict:
    """The evaluator's source hash, package versions (with the notebook packages) and
    interpreter."""
    notebook_versions = {}
    for name in NOTEBOOK_PACKAGES:
        try:
            notebook_versions[name] = version(name)
        except PackageNotFoundError:
            notebook_versions[name] = None
    return {"code_hash": code_hash(), "package_versions": package_versions(),
            "notebook_packages": notebook_versions, "python": sys.version.split()[0],
            "executable": sys.executable}


def _existing_analysis(staging_root: Path, names: list[Path]) -> list[Path]:
    found = [p for p in [staging_root / MANIFEST_NAME, staging_root / DATA_FOLDER,
                         staging_root / SOURCES_FOLDER, *names] if p.exists()]
    return found


@dataclass(frozen=True)
class AnalyzeOptions:
    """How the analysis is prepared: ``execute`` the notebooks (each cell within
    ``cell_timeout`` seconds), ``census_limit`` scenes per split of the census (None: all),
    ``classical_budget`` tasks each planner runs on (None: the template's default), the
    ``split`` the metrics notebooks run on, ``force`` into a staging root that holds an
    analysis, ``template_dir`` (None: :func:`default_template_dir`) and ``extra_params``
    set in every notebook's parameters cell."""
    execute: bool = False
    census_limit: int | None = None
    classical_budget: int | None = None
    split: str = "test"
    force: bool = False
    template_dir: Any = None
    extra_params: dict | None = None
    cell_timeout: float = DEFAULT_CELL_TIMEOUT
    copy: bool = False

    def to_dict(self, dataset_path, resolutions: list) -> dict:
        """The manifest's ``options`` block."""
        return {"dataset_path": str(dataset_path), "resolutions": resolutions, "split": self.split,
                "execute": bool(self.execute), "census_limit": self.census_limit,
                "classical_budget": self.classical_budget, "force": bool(self.force),
                "copy": bool(self.copy)}

    def parameters(self, root: Path, n: int, folder: Path, stem: str) -> dict:
        """The parameters cell of notebook ``stem`` at resolution ``n``."""
        params = {"dataset_path": str(root), "resolution": n, "split": self.split,
                  "census_limit": self.census_limit, "output_dir": str(folder / "outputs" / stem)}
        if self.classical_budget is not None:
            params["classical_budget"] = int(self.classical_budget)
        params.update(self.extra_params or {})
        return params



@dataclass(frozen=True)
class AnalysisPlan:
    """What an analysis writes: the dataset ``root`` and each resolution's data identity,
    the ``staging_root``, the templates (stem -> path) and each notebook's path
    (``(resolution, stem)`` -> path)."""
    root: Path
    identities: dict
    staging_root: Path
    templates: dict
    outputs: dict

    @property
    def resolutions(self) -> list:
        return list(self.identities)


@dataclass(frozen=True)
class PreparedNotebook:
    """A parameterised notebook written into the staging root, with its manifest ``entry``
    (updated when it runs) and the ``folder`` it runs in."""
    entry: dict
    nb: Any
    path: Path
    folder: Path


def _templates(template_dir) -> dict:
    template_dir = Path(template_dir) if template_dir is not None else default_template_dir()
    templates = {}
    for stem in TEMPLATES:
        p = template_dir / f"_{stem}.ipynb"
        if not p.is_file():
            raise AnalyzeError(f"template {p} not found (the templates live in the source tree's "
                               f"notebooks/ folder)")
        templates[stem] = p
    return templates


def _dataset(dataset_path, resolutions) -> tuple[Path, dict]:
    """The dataset root and the identity of each resolution (each must hold shards)."""
    resolutions = [int(n) for n in resolutions]
    if not resolutions:
        raise AnalyzeError("no resolution given")
    if len(set(resolutions)) != len(resolutions):
        raise AnalyzeError(f"resolution given twice: {resolutions}")
    try:
        root = resolve_dataset_root(dataset_path).resolve()
        identities = {n: data_identity(root, n) for n in resolutions}
    except DataError as e:
        raise AnalyzeError(f"dataset {dataset_path}: {e}") from None
    for n, ident in identities.items():
        if not ident["splits"]:
            raise AnalyzeError(f"dataset {root}: no split folder with shards at {n}x{n}")
    return root, identities


def plan_analysis(dataset_path, resolutions, staging_root, options: AnalyzeOptions) -> AnalysisPlan:
    """Check the templates, the dataset and the staging root (apart from the dataset, and
    without an analysis unless ``options.force``; its old manifest is removed)."""
    templates = _templates(options.template_dir)
    root, identities = _dataset(dataset_path, resolutions)
    staging_root = Path(staging_root).resolve()
    if staging_root == root or root in staging_root.parents or staging_root in root.parents:
        raise AnalyzeError(f"staging root {staging_root} and dataset root {root} overlap; "
                           f"stage the analysis in a separate folder")
    outputs = {(n, stem): staging_root / resolution_folder_name(n) / f"{stem}.ipynb"
               for n in identities for stem in TEMPLATES}
    existing = _existing_analysis(staging_root, list(outputs.values()))
    if existing and not options.force:
        raise StagingExists(f"{staging_root} already holds an analysis ({existing[0]})")
    if (staging_root / MANIFEST_NAME).exists():
        (staging_root / MANIFEST_NAME).unlink()
    _clear_export(staging_root)
    return AnalysisPlan(root, identities, staging_root, templates, outputs)


def _manifest(plan: AnalysisPlan, dataset_path, options: AnalyzeOptions) -> dict:
    return {
        "format": ANALYSIS_FORMAT, "created_utc": utc_now(),
        "options": options.to_dict(dataset_path, plan.resolutions),
        "staging_root": str(plan.staging_root),
        "data": {"dataset_root": str(plan.root),
                 "resolutions": {str(n): plan.identities[n] for n in plan.resolutions}},
        "evaluator": evaluator_identity(),
        "kernel": {"name": KERNEL_NAME,
                   "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]},
        "notebooks": [], "failed": [],
    }


def _prepare(plan: AnalysisPlan, n: int, stem: str, options: AnalyzeOptions, nbformat) -> PreparedNotebook:
    """Write notebook ``stem`` of resolution ``n`` with its parameters set (its dataset is
    the staged snapshot)."""
    folder = plan.staging_root / resolution_folder_name(n)
    params = options.parameters(plan.staging_root / DATA_FOLDER, n, folder, stem)
    template = plan.templates[stem]
    try:
        nb = parameterise(template, params)
    except AnalyzeError as e:
        raise AnalyzeError(f"{template}: {e}") from None
    path = plan.outputs[(n, stem)]
    atomic_write_text(path, nbformat.writes(nb) + "\n")
    entry = {"resolution": n, "notebook": stem,
             "path": path.relative_to(plan.staging_root).as_posix(),
             "template": template.name, "template_sha256": sha256_file(template),
             "ready": True, "status": "not_executed", "seconds": None, "error": None,
             "parameters": {k: v for k, v in params.items()}}
    return PreparedNotebook(entry, nb, path, folder)


def _execute(prepared: list, manifest: dict, plan: AnalysisPlan, options: AnalyzeOptions,
             progress, nbformat) -> None:
    """Run each prepared notebook, record it in the manifest and rewrite the manifest."""
    for p in prepared:
        if progress is not None:
            progress(f"executing {p.entry['path']}")
        result = execute_notebook(p.nb, p.folder, timeout=options.cell_timeout)
        atomic_write_text(p.path, nbformat.writes(p.nb) + "\n")
        p.entry.update(result)
        p.entry["notebook_sha256"] = sha256_file(p.path)
        if result["status"] == "failed":
            manifest["failed"].append({"path": p.entry["path"], **result["error"]})
        atomic_write_json(plan.staging_root / MANIFEST_NAME, manifest)


def analyze_notebooks(dataset_path, resolutions, staging_root, *, options: AnalyzeOptions | None = None,
                      progress=None, **overrides) -> dict:
    """Prepare (and with ``execute`` run) the analysis notebooks; returns the manifest.

    ``options``: an :class:`AnalyzeOptions`; keyword ``overrides`` set its fields
    (``execute=``, ``census_limit=``, ``classical_budget=``, ``split=``, ``force=``,
    ``template_dir=``, ``extra_params=``, ``cell_timeout=``), an unknown name is a
    ``TypeError``. ``dataset_path`` is a dataset root or ``"shipped"``; every resolution must
    be present in it (AnalyzeError otherwise). ``census_limit`` caps the scenes per split of
    the census (None: all), ``classical_budget`` the tasks each planner runs on (None: the
    template's default). A staging root that already holds an analysis (its manifest or
    one of the notebooks to write) is refused (:class:`StagingExists`) unless ``force``.
    A failing cell does not raise: the manifest records it (``status: failed`` and the
    error) and lists the notebook under ``failed``; the remaining notebooks still run.
    ``progress(message)`` is called before each notebook runs.
    """
    options = merge_options(AnalyzeOptions, options, overrides, "analyze_notebooks")
    nbformat = _require("nbformat")
    if options.execute:
        for name in NOTEBOOK_PACKAGES:
            _require(name)
    plan = plan_analysis(dataset_path, resolutions, staging_root, options)
    manifest = _manifest(plan, dataset_path, options)
    manifest["parquet_staging"] = stage_shards(plan, copy=options.copy)
    manifest["source_notebooks"] = copy_source_notebooks(plan)
    prepared = []
    for n in plan.resolutions:
        (plan.staging_root / resolution_folder_name(n)).mkdir(parents=True, exist_ok=True)
        for stem in TEMPLATES:
            prepared.append(_prepare(plan, n, stem, options, nbformat))
            manifest["notebooks"].append(prepared[-1].entry)
    manifest["states"] = export_states(manifest, plan.staging_root, False)
    atomic_write_json(plan.staging_root / MANIFEST_NAME, manifest)
    if not options.execute:
        return manifest
    _execute(prepared, manifest, plan, options, progress, nbformat)
    manifest["finished_utc"] = utc_now()
    manifest["states"] = export_states(manifest, plan.staging_root, True)
    atomic_write_json(plan.staging_root / MANIFEST_NAME, manifest)
    return manifest
