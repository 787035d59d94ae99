"""Hostile probes, round 2: spec counts and limits over their caps, the pass plan generated
lazily, console text that rich would read as markup or the terminal as control sequences,
cost weights whose edge costs overflow, and ``references_from: ""``.

Each family is fixed at its mechanism: every count and limit of the spec has a cap
(``passage_jax.run.specification.schema.CAPS``) checked when the spec is loaded; the requests of a
seed are computed from the counts, never listed; every user-named or file-read string on
the console goes through ``cli.console.printable`` (control characters escaped) and reaches
rich as text, never as markup; a weight is at most ``MAX_COST_WEIGHT`` and a scene's largest
edge cost at most ``MAX_EDGE_COST``; a path key holds null or a non-empty path.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import fixtures_runner as F
import pytest
from fixtures_data import make_rows, mutated, write_foreign

from cli.__main__ import failure_line
from cli.__main__ import main as cli_main
from cli.console import printable
from passage_jax.checks import MAX_COST_WEIGHT
from passage_jax.data.validate import MAX_EDGE_COST, DataError, RowRef, parse_metadata
from passage_jax.run import SpecError, parse_spec
from passage_jax.run.admission import earlier_seed_folder
from passage_jax.run.execution import RequestPlan, n_passes, pass_at, passes
from passage_jax.run.specification.schema import CAPS

ROOT = Path(__file__).resolve().parents[2]
FAST = {"latency_warmup": 0, "latency_repeats": 1, "quality_repeat_index": 0}
SPOOF = "score: all 3 seeds verified"


def _base(**over) -> dict:
    d = {"method_name": "m", "inference": "passage_jax.planners.bfs:make_planner", "resolution": 64,
         "cost_model": "energy", "split": "test", "dataset_path": "shipped"}
    d.update(over)
    return d


def _cli(*argv, cwd=None, timeout=300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "cli", *map(str, argv)], cwd=cwd or ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _no_raw_controls(text: str) -> bool:
    """No control character but the line ends (C0 other than newline, DEL, C1)."""
    return not any((ord(c) < 32 and c != "\n") or 0x7f <= ord(c) <= 0x9f for c in text)


# --------------------------------------------------------------------------- #
# 1. every count and limit of the spec has a cap, checked when the spec is loaded
# --------------------------------------------------------------------------- #

OVER_CAP = [
    ("latency_repeats", {"latency_repeats": 10**9}, "latency_repeats: 1000000000 exceeds its cap 1,000"),
    ("latency_repeats", {"latency_repeats": 1001}, "latency_repeats: 1001 exceeds its cap 1,000"),
    ("latency_warmup", {"latency_warmup": 10**9}, "latency_warmup: 1000000000 exceeds its cap 1,000"),
    ("n_samples", {"n_samples": 10**7 + 1}, "n_samples: 10000001 exceeds its cap 10,000,000"),
    ("resolution", {"resolution": 10**6}, "resolution: 1000000 exceeds its cap 16,384"),
    ("seeds", {"seeds": list(range(1001))}, "seeds: 1,001 seeds exceed the cap 1,000"),
    ("seed", {"seeds": [1234, 2**32]}, "seeds: seed 4294967296 exceeds its cap 4,294,967,295"),
    ("session_warmup", {"timing_profile": "native_raw_path_persistent_v1", "session_warmup": 10**9},
     "session_warmup: 1000000000 exceeds its cap 10,000"),
    ("worker_warmup", {"worker_warmup": 10**6}, "worker_warmup: 1000000 exceeds its cap 1,000"),
    ("batch_size", {"timing_profile": "batched_v1", "batch_size": 10**6},
     "batch_size: 1000000 exceeds its cap 65,536"),
    ("batch_warmup", {"timing_profile": "batched_v1", "batch_size": 8, "batch_warmup": 10**4},
     "batch_warmup: 10000 exceeds its cap 1,000"),
    ("reference_max_expansions", {"reference_max_expansions": 10**13},
     "reference_max_expansions: 10000000000000 exceeds its cap 1,000,000,000,000"),
    ("worker_memory_mb", {"execution": "supervised", "budget": {"wall_time_ms": 100},
                          "worker_memory_mb": 10**9}, "worker_memory_mb: 1000000000 exceeds its cap"),
    ("worker_grace_ms", {"worker_grace_ms": 1e300}, "worker_grace_ms: 1e+300 exceeds its cap 3,600,000"),
    ("cost_weight", {"cost_weight": 1.797e308}, "cost_weight: 1.797e+308 exceeds its cap 1,000,000"),
    ("budget.max_expansions", {"budget": {"max_expansions": 10**15}},
     "budget.max_expansions: 1000000000000000 exceeds its cap"),
    ("budget.max_queue_operations", {"budget": {"max_queue_operations": 10**13}},
     "budget.max_queue_operations: 10000000000000 exceeds its cap"),
    ("budget.max_live_states", {"budget": {"max_live_states": 10**13}},
     "budget.max_live_states: 10000000000000 exceeds its cap"),
    ("budget.wall_time_ms", {"budget": {"wall_time_ms": 1e300}},
     "budget.wall_time_ms: 1e+300 exceeds its cap 86,400,000"),
]


@pytest.mark.parametrize("key, over, message", OVER_CAP, ids=[f"{k}-{i}" for i, (k, _, _) in
                                                               enumerate(OVER_CAP)])
def test_a_count_over_its_cap_is_refused_naming_key_value_and_cap(key, over, message):
    with pytest.raises(SpecError) as e:
        parse_spec(_base(**over))
    assert message in str(e.value) and "Caps" in str(e.value), str(e.value)


def test_every_cap_is_finite_and_every_capped_key_is_checked():
    import math

    assert all(math.isfinite(v) and v > 0 for v in CAPS.values())
    covered = {k for k, _, _ in OVER_CAP}
    assert covered == set(CAPS), set(CAPS) - covered


def test_values_at_their_caps_are_accepted():
    spec = parse_spec(_base(latency_repeats=CAPS["latency_repeats"], latency_warmup=CAPS["latency_warmup"],
                            quality_repeat_index=CAPS["latency_repeats"] - 1, n_samples=CAPS["n_samples"],
                            resolution=CAPS["resolution"], seeds=[0, CAPS["seed"]],
                            cost_weight=MAX_COST_WEIGHT, worker_warmup=CAPS["worker_warmup"],
                            reference_max_expansions=CAPS["reference_max_expansions"],
                            budget={"max_expansions": CAPS["budget.max_expansions"],
                                    "wall_time_ms": CAPS["budget.wall_time_ms"]}))
    assert spec.latency_repeats == 1000 and spec.seeds == (0, 2**32 - 1)


def test_negative_seeds_are_refused():
    with pytest.raises(SpecError, match=r"seeds: must be integers in \[0, 4,294,967,295\] \(seed -1"):
        parse_spec(_base(seeds=[-1, 2]))


def test_run_refuses_absurd_repeats_in_a_second_before_jax_and_writes_nothing(tmp_path):
    spec = tmp_path / "s.json"
    spec.write_text(json.dumps(_base(latency_repeats=1_000_000_000)))
    t0 = time.monotonic()
    p = _cli("run", "--spec", spec, "--output", tmp_path / "out", cwd=tmp_path)
    took = time.monotonic() - t0
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert "latency_repeats: 1000000000 exceeds its cap 1,000" in lines[0]
    assert not (tmp_path / "out").exists() and took < 30


# --------------------------------------------------------------------------- #
# 1b. the pass plan is generated, never listed
# --------------------------------------------------------------------------- #

@dataclasses.dataclass
class _Stub:
    id: str


def _listed(spec) -> list:
    """The passes as the old list made them (the reference for the generated ones)."""
    if spec.session_profile:
        return [("warm", 0)]
    return ([("cold", 0)] + [("warmup", i) for i in range(spec.latency_warmup)]
            + [("warm", i) for i in range(spec.latency_repeats)])


@pytest.mark.parametrize("over", [{}, {"latency_warmup": 0, "latency_repeats": 1},
                                  {"latency_warmup": 3, "latency_repeats": 2, "quality_repeat_index": 1},
                                  {"latency_warmup": 1000, "latency_repeats": 1000},
                                  {"timing_profile": "native_raw_path_persistent_v1"}])
def test_generated_passes_and_requests_equal_the_listed_ones(over):
    spec = parse_spec(_base(**over))
    want = _listed(spec)
    gen = passes(spec)
    assert not isinstance(gen, (list, tuple)) and list(gen) == want and n_passes(spec) == len(want)
    stubs = [_Stub(f"{i:010d}") for i in range(3)]
    plan = RequestPlan(spec, stubs)
    assert len(plan) == 3 * len(want)
    for i in sorted({0, 1, 2, min(3, len(plan) - 1), len(plan) // 2, len(plan) - 1}):
        assert plan[i] == (*want[i // 3], i % 3, stubs[i % 3].id)
    with pytest.raises(IndexError):
        plan[len(plan)]
    with pytest.raises(IndexError):
        pass_at(spec, len(want))


def test_a_plan_allocates_nothing_per_pass_even_past_the_caps():
    # past the caps (the spec would refuse it): built from the counts, the plan stays tiny
    spec = dataclasses.replace(parse_spec(_base()), latency_warmup=10**9, latency_repeats=10**9)
    stubs = [_Stub(f"{i:010d}") for i in range(4)]
    tracemalloc.start()
    try:
        t0 = time.monotonic()
        plan = RequestPlan(spec, stubs)
        gen = passes(spec)
        first = [next(gen) for _ in range(3)]
        last = plan[len(plan) - 1]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.monotonic() - t0 < 1.0 and peak < 64 * 1024, peak
    assert len(plan) == 4 * (1 + 2 * 10**9)
    assert first == [("cold", 0), ("warmup", 0), ("warmup", 1)]
    assert last == ("warm", 10**9 - 1, 3, "0000000003")


# --------------------------------------------------------------------------- #
# 3. references_from "" and the other path keys
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize("key", ["references_from", "dataset_path", "runtime_bundle_manifest", "roster"])
@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_path_is_refused_naming_the_key(key, value):
    over = {key: value}
    if key == "roster":
        over["roster_sha256"] = "0" * 64
    with pytest.raises(SpecError, match=rf"{key}: must be .*a non-empty path, no NUL\) or null; an "
                                        rf"empty string names no file or folder"):
        parse_spec(_base(**over))


def test_an_empty_references_from_is_refused_by_the_reuse_itself():
    with pytest.raises(ValueError, match="references_from: '' names no folder"):
        earlier_seed_folder("", ValueError)


# --------------------------------------------------------------------------- #
# 3. weights whose edge costs overflow
# --------------------------------------------------------------------------- #

def _metadata(**solver_weights) -> dict:
    md = make_rows(1)[0]["metadata"]
    for obj, w in solver_weights.items():
        md["solvers"][obj]["weight"] = w
    return md


REF = RowRef("shard.parquet", 0, "0000000000")


@pytest.mark.parametrize("obj, w", [("energy", 1.797e308), ("elevation", 1e7), ("slope_uphill", 1e300),
                                    ("energy", -1.0)])
def test_a_weight_over_the_bound_is_refused_naming_the_field(obj, w):
    with pytest.raises(DataError, match=rf"shard.parquet row 0 scene 0000000000: metadata\.solvers\.{obj}"
                                        rf"\.weight must be a finite number in \[0, 1,000,000\]"):
        parse_metadata(json.dumps(_metadata(**{obj: w})), 8, "test", REF)


def test_a_weight_at_the_bound_is_accepted():
    md = parse_metadata(json.dumps(_metadata(energy=MAX_COST_WEIGHT, elevation=MAX_COST_WEIGHT,
                                             slope_uphill=MAX_COST_WEIGHT)), 8, "test", REF)
    assert md["solvers"]["energy"]["weight"] == 1e6


def test_slope_edge_costs_are_bounded_with_the_relief():
    assert MAX_EDGE_COST == 1e20
    md = _metadata()
    md["calibration"] = {"min": 0.0, "max": 1e12}  # slope 10 * (1e12 / 30)**2 * 30 overflows the bound
    with pytest.raises(DataError, match=r"metadata\.solvers\.slope_uphill\.weight 10\.0 with the "
                                        r"calibration relief 1e\+12 m gives edge costs up to .* over the "
                                        r"bound 1e\+20"):
        parse_metadata(json.dumps(md), 8, "test", REF)


def test_audit_refuses_an_overflowing_weight_naming_scene_and_field(tmp_path, capsys):
    rows = make_rows(3)
    bad = mutated(rows[1])
    bad["metadata"]["solvers"]["energy"]["weight"] = 1.797e308
    rows[1] = bad
    write_foreign(tmp_path / "data", rows, name="w.parquet")
    out = tmp_path / "audit.json"
    rc = cli_main(["audit", "--dataset-path", str(tmp_path / "data"), "--resolution", "8", "--no-qualify",
                   "--workers", "1", "--json", str(out)])
    assert rc == 1
    failing = json.loads(out.read_text())["summary"]["failing"]
    assert [f["id"] for f in failing] == ["0000000001"]
    assert "metadata.solvers.energy.weight must be a finite number in [0, 1,000,000]" in failing[0]["error"]
    assert "invalid scene 0000000001" in capsys.readouterr().err


# --------------------------------------------------------------------------- #
# 2. console text is text: never markup, control characters escaped
# --------------------------------------------------------------------------- #

def test_printable_escapes_every_control_character():
    assert printable("a\nb\rc\td") == "a\\nb\\rc\\td"
    assert printable("\x1b[31mred\x1b[0m") == "\\x1b[31mred\\x1b[0m"
    assert printable("\x00\x07\x7f\x85\x9b") == "\\x00\\x07\\x7f\\x85\\x9b"
    assert printable("x\u2028y\u202ez") == "x\\u2028y\\u202ez"
    assert printable("rk[/]x [red]ü") == "rk[/]x [red]ü"


def test_failure_line_shows_control_characters_escaped_on_one_line():
    line, code = failure_line("score", ValueError(f"run folder nope\n{SPOOF}\x1b[2J does not exist"))
    assert code == 2 and "\n" not in line and "\x1b" not in line
    assert line == f"score: run folder nope\\n{SPOOF}\\x1b[2J does not exist"
    line, code = failure_line("score", KeyError("a\nb"))
    assert code == 70 and "\n" not in line and "a\\nb" in line


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    root = tmp_path_factory.mktemp("r2_cohort")
    F.write_cohort(root)
    return root


@pytest.fixture(scope="module")
def run_folder(cohort, tmp_path_factory):
    """An unscored one-seed run on the fixture cohort."""
    base = tmp_path_factory.mktemp("r2_run")
    spec = base / "s.json"
    spec.write_text(json.dumps(F.spec_dict(cohort, **FAST)))
    assert cli_main(["run", "--spec", str(spec), "--output", str(base / "run"), "--no-progress"]) == 0
    return base / "run"


def _copy(run: Path, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(run, dest)
    return dest


@pytest.mark.parametrize("name", ["rk[/]x", pytest.param("rb[red]x", marks=pytest.mark.slow),
                                  pytest.param("[bold]b[/bold]", marks=pytest.mark.slow)])
def test_score_shows_a_run_folder_named_like_markup_as_typed(run_folder, tmp_path, name):
    run = _copy(run_folder, tmp_path / name)
    p = _cli("score", "--run", name, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "MarkupError" not in p.stderr + p.stdout and "internal error" not in p.stderr
    assert f"score {name}" in p.stdout, p.stdout
    assert (run / "seed-1234" / "metrics.json").is_file()


def test_audit_json_named_like_markup_is_written_and_shown_as_typed(cohort, tmp_path):
    p = _cli("audit", "--dataset-path", cohort, "--resolution", F.N, "--no-qualify", "--json", "a[/]b.json",
             cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "MarkupError" not in p.stderr + p.stdout
    assert "wrote a[/]b.json" in p.stdout and (tmp_path / "a[" / "]b.json").is_file()


@pytest.mark.parametrize("argv, shown", [
    (["score", "--run", f"nope\n{SPOOF}"], f"score: run folder nope\\n{SPOOF} does not exist"),
    (["score", "--run", "nope\x1b[31mred\x1b[0m"],
     "score: run folder nope\\x1b[31mred\\x1b[0m does not exist"),
    (["audit", "--dataset-path", "gone\r\x9bx", "--resolution", "8"],
     "audit: dataset root gone\\r\\x9bx does not exist"),
    (["run", "--spec", "s\nrun written to out.yaml", "--output", "o"],
     "run: spec s\\nrun written to out.yaml: file not found"),
    (["score", "--run", "x", "--bogus\nscore: ok"], "--bogus\\nscore: ok"),
])
def test_error_lines_show_control_characters_escaped(tmp_path, argv, shown):
    p = _cli(*argv, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip("\n").split("\n")
    assert len(lines) == 1 and shown in lines[0], p.stderr
    assert _no_raw_controls(p.stderr + p.stdout), repr(p.stderr)


def test_a_spec_error_naming_a_control_character_path_is_one_line(tmp_path):
    spec = tmp_path / f"s\n{SPOOF}.json"
    spec.write_text(json.dumps(_base(latency_repeats=10**9)))
    p = _cli("run", "--spec", spec.name, "--output", "o", cwd=tmp_path)
    lines = p.stderr.strip("\n").split("\n")
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert f"s\\n{SPOOF}.json" in lines[0] and "latency_repeats: 1000000000 exceeds its cap" in lines[0]


def test_score_of_a_folder_named_with_a_newline_forges_no_line(run_folder, tmp_path):
    name = f"r\n{SPOOF}\x1b[2J"
    _copy(run_folder, tmp_path / name)
    p = _cli("score", "--run", name, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = p.stdout + p.stderr
    assert _no_raw_controls(out), repr(out)
    assert not any(line.strip().startswith(SPOOF) for line in out.splitlines()), out
    assert f"r\\n{SPOOF}\\x1b[2J" in p.stderr  # the "scored ..." log line, escaped


def test_audit_of_a_shard_named_with_a_newline_reports_one_line_per_scene(tmp_path):
    rows = make_rows(3)
    bad = mutated(rows[2])
    del bad["metadata"]["calibration"]
    rows[2] = bad
    write_foreign(tmp_path / "data", rows, name="bad\nname\x1b[31m.parquet")
    p = _cli("audit", "--dataset-path", tmp_path / "data", "--resolution", "8", "--no-qualify",
             cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    assert _no_raw_controls(p.stdout + p.stderr), repr(p.stderr)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("invalid scene 0000000002"), p.stderr
    assert "bad\\nname\\x1b[31m.parquet" in lines[0]
