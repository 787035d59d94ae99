"""bench: run + score + sidecar.json into a fresh folder; the CLI prints the table."""
from __future__ import annotations

import json

import yaml
from score_support import runs, spec_dict

from passage_jax.fileio import sha256_file
from passage_jax.protocol.records import code_hash


def test_bench_cli(tmp_path, capsys):
    from cli.__main__ import main

    R = runs()
    spec = tmp_path / "greedy.yaml"
    d = spec_dict("greedy", R["cohort"], n_samples=3)
    d["results_root"] = str(tmp_path / "results")
    spec.write_text(yaml.safe_dump(d))
    assert main(["bench", "--spec", str(spec), "--no-progress",
                 "--container-digest", "sha256:" + "a" * 64]) == 0
    text = capsys.readouterr().out
    assert "regret median" in text and "success" in text
    outs = sorted((tmp_path / "results").iterdir())
    assert len(outs) == 1 and outs[0].name.startswith("greedy-")
    out = outs[0]
    side = json.loads((out / "sidecar.json").read_text())
    m = json.loads((out / "seed-1234" / "metrics.json").read_text())
    assert side["metrics"]["seed-1234"] == m["primary"]
    assert side["seeds"] == [1234]
    assert side["evaluated_subset"]["n_tasks"] == 3
    assert side["dataset"]["shards"][0]["sha256"] == sha256_file(
        next((R["cohort"] / "64x64" / "test").glob("*.parquet")))
    assert side["evaluator"]["sha256"] == code_hash()["sha256"]
    assert side["container_digest"] == "sha256:" + "a" * 64
    assert side["files"]["seed-1234"]["per_sample.npz"] == sha256_file(
        out / "seed-1234" / "per_sample.npz")
    for k in ("hardware", "timing", "precision", "inference_kwargs", "spec_sha256"):
        assert side[k] is not None, k
    # a second bench never overwrites: a new folder; an explicit taken folder is refused
    assert main(["bench", "--spec", str(spec), "--no-progress"]) == 0
    outs2 = sorted((tmp_path / "results").iterdir())
    assert len(outs2) == 2
    side2 = json.loads((outs2[-1] / "sidecar.json").read_text())
    assert side2["container_digest"] is None or __import__("os").environ.get("PASSAGE_CONTAINER_DIGEST")
    # the provenance every sidecar states
    assert side2["determinism"] == "non_deterministic" and side2["split_role"] == "undeclared"
    assert side2["calibration_decisions_sha256"] is None
    assert main(["bench", "--spec", str(spec), "--no-progress", "--output", str(out)]) == 2
    assert "already holds a run" in capsys.readouterr().err


def test_bench_against_compares_and_reports(tmp_path, capsys):
    """bench --against: both runs, compare.json whose seed-mean contrasts equal the two
    runs' own metrics, and the report; a second call on the same folder is refused."""
    from cli.__main__ import main

    R = runs()
    specs = {}
    for method in ("exact", "bfs"):
        specs[method] = tmp_path / f"{method}.yaml"
        specs[method].write_text(yaml.safe_dump(spec_dict(method, R["cohort"], n_samples=3,
                                                          seeds=(1234, 2026, 3407))))
    out = tmp_path / "pair"
    args = ["bench", "--spec", str(specs["exact"]), "--against", str(specs["bfs"]), "--no-progress",
            "--output", str(out), "--n-bootstrap", "200"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "exact (A) − bfs (B)" in text
    cmp = json.loads((out / "compare.json").read_text())
    assert (out / "report" / "report.md").is_file()
    for m in ("regret_median", "success_rate"):
        mean = {}
        for method in ("exact", "bfs"):
            vals = [json.loads((out / method / f"seed-{s}" / "metrics.json").read_text())["primary"][m]
                    for s in (1234, 2026, 3407)]
            mean[method] = sum(vals) / 3
        assert abs(cmp["contrasts"][m]["delta"] - (mean["exact"] - mean["bfs"])) < 1e-12
    assert main(args) == 2
    assert "is not empty" in capsys.readouterr().err
