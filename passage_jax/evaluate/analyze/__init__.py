"""The analysis notebooks over scored runs (docs/analyze.md): :mod:`._notebooks` plans,
stages and executes them, :mod:`._export` exports the states they read. This module is the
package's only public face.
"""
from __future__ import annotations

from passage_jax.evaluate.analyze._export import (
    DATA_FOLDER,
    SOURCES_FOLDER,
    STAGING_METHODS,
    AnalyzeError,
    MissingDependency,
    StagingExists,
    StagingRefused,
    copy_source_notebooks,
    export_states,
    stage_shards,
)
from passage_jax.evaluate.analyze._notebooks import (
    ANALYSIS_FORMAT,
    KERNEL_NAME,
    MANIFEST_NAME,
    NOTEBOOK_PACKAGES,
    TEMPLATES,
    AnalysisPlan,
    AnalyzeOptions,
    PreparedNotebook,
    analyze_notebooks,
    data_identity,
    default_template_dir,
    evaluator_identity,
    execute_notebook,
    parameterise,
    parameters_source,
    plan_analysis,
    resolution_folder_name,
)

__all__ = [
    "ANALYSIS_FORMAT", "TEMPLATES", "MANIFEST_NAME", "NOTEBOOK_PACKAGES", "KERNEL_NAME",
    "AnalyzeError", "MissingDependency", "StagingExists", "analyze_notebooks",
    "default_template_dir", "parameters_source", "parameterise", "execute_notebook",
    "data_identity", "evaluator_identity", "resolution_folder_name", "AnalyzeOptions",
    "AnalysisPlan", "PreparedNotebook", "plan_analysis", "StagingRefused", "stage_shards",
    "copy_source_notebooks", "export_states", "DATA_FOLDER", "SOURCES_FOLDER", "STAGING_METHODS",
]
