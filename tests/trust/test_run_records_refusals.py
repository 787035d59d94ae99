"""The run records of a finished run folder (``run.json``, ``run_started.json``), read by
:meth:`passage_jax.protocol.runfolder.RunRecords.read`: each single fault is refused with its
own error class and one line naming the file and the field."""
from __future__ import annotations

import json

import pytest

from passage_jax.protocol.records import RUN_FORMAT
from passage_jax.protocol.runfolder import (
    RUN_STARTED,
    RUN_STARTED_FORMAT,
    RUN_SUMMARY,
    FolderError,
    FolderForeign,
    FolderIncomplete,
    RunRecords,
)

RUN = {"format": RUN_FORMAT, "method_name": "bfs", "spec_sha256": "ab" * 32, "seeds": [1, 2],
       "code": {"sha256": "cd" * 32}}
STARTED = {"format": RUN_STARTED_FORMAT, "method_name": "bfs", "spec_sha256": "ab" * 32,
           "seeds": [1, 2], "identity": {"code_sha256": "cd" * 32}}


def _folder(tmp_path, run=RUN, started=STARTED):
    for name, doc in ((RUN_SUMMARY, run), (RUN_STARTED, started)):
        if doc is not None:
            text = doc if isinstance(doc, str) else json.dumps(doc)
            (tmp_path / name).write_text(text)
    return tmp_path


def test_honest_records_are_read(tmp_path):
    run = RunRecords.read(_folder(tmp_path))
    assert (run.method_name, run.seeds, run.code_sha256) == ("bfs", (1, 2), "cd" * 32)
    assert run.identity == STARTED["identity"]
    alone = tmp_path / "without_run_started"
    alone.mkdir()
    assert RunRecords.read(_folder(alone, started=None)).identity is None


@pytest.mark.parametrize("run, started, error, text", [
    ({**RUN, "format": "x"}, STARTED, FolderIncomplete, f"{RUN_SUMMARY}: format 'x' is not {RUN_FORMAT}"),
    ({**RUN, "method_name": 3}, STARTED, FolderError,
     f"{RUN_SUMMARY}: field 'method_name' must be str, got int 3"),
    ({k: v for k, v in RUN.items() if k != "spec_sha256"}, STARTED, FolderError,
     f"{RUN_SUMMARY}: field 'spec_sha256' is missing"),
    ({**RUN, "seeds": [1, 1]}, STARTED, FolderIncomplete,
     f"{RUN_SUMMARY}: seeds must be a non-empty list of distinct integers, got [1, 1]"),
    ([1], STARTED, FolderIncomplete, f"{RUN_SUMMARY}: not a JSON object (got list)"),
    (RUN, "{", FolderIncomplete, f"{RUN_STARTED}: not JSON"),
    (RUN, [1], FolderIncomplete, f"{RUN_STARTED}: not a JSON object (got list)"),
    (RUN, {**STARTED, "format": "y"}, FolderIncomplete,
     f"{RUN_STARTED}: format 'y' is not {RUN_STARTED_FORMAT}"),
    (RUN, {**STARTED, "seeds": [1]}, FolderForeign, "seeds [1, 2] differs from"),
    (RUN, {k: v for k, v in STARTED.items() if k != "identity"}, FolderError,
     f"{RUN_STARTED}: field 'identity' is missing"),
    (RUN, {**STARTED, "identity": []}, FolderError,
     f"{RUN_STARTED}: field 'identity' must be dict, got list []"),
])
def test_each_fault_is_refused_with_its_class_and_line(tmp_path, run, started, error, text):
    with pytest.raises(FolderError) as e:
        RunRecords.read(_folder(tmp_path, run, started))
    assert type(e.value) is error, (type(e.value), str(e.value))
    assert text in str(e.value) and "\n" not in str(e.value)
