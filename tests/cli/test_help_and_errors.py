"""First contact with the command line: help without reST markup, one-line usage errors,
spec errors that suggest the near key and state a value once, ``doctor`` honest about the
CUDA plugin and complete in ``--json``, ``init-spec``'s template on the shipped baselines'
procedure limits, and ``compare`` warning when procedure limits differ."""
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import cli.__main__ as M
from cli import doctor
from passage_jax.run import parse_spec
from passage_jax.run.specification.parse import STARTER_SPEC, SpecError, load_spec

ROOT = Path(__file__).resolve().parents[2]
MARKUP = ("``", ":func:", ":class:", ":mod:", ":meth:", ":data:", ":attr:")


def _minimal(**over):
    d = {"method_name": "m", "inference": "passage_jax.planners.bfs:make_planner",
         "resolution": 64, "cost_model": "elevation", "split": "test", "dataset_path": "shipped"}
    d.update(over)
    return d


# --------------------------------------------------------------------------- #
# help
# --------------------------------------------------------------------------- #

def test_plain_strips_rest_markup():
    assert M.plain("Entry point: ``python -m cli <command> ...``.") == \
        "Entry point: python -m cli <command> ..."
    assert M.plain("see :func:`~passage_jax.run.conform` and :class:`passage_jax.run.RunSpec`") == \
        "see conform and passage_jax.run.RunSpec"
    assert M.plain(None) is None


def test_top_level_help_has_no_markup():
    proc = subprocess.run([sys.executable, "-m", "cli", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0
    assert "Entry point: python -m cli <command> ..." in proc.stdout
    assert not any(m in proc.stdout for m in MARKUP), proc.stdout


@pytest.mark.parametrize("command", list(M.COMMANDS))
def test_command_help_has_no_markup(command):
    text = M.build_parser(command)._subparsers._group_actions[0].choices[command].format_help()
    assert not any(m in text for m in MARKUP), text


def test_usage_error_is_one_named_line(capsys):
    with pytest.raises(SystemExit) as e:
        M.main(["audit"])
    assert e.value.code == M.EXIT_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("audit: the following arguments are required: --dataset-path, --resolution")
    assert "error:" not in err
    with pytest.raises(SystemExit):
        M.main(["audit", "--dataset-path", "x", "--resolution", "sixty-four"])
    assert capsys.readouterr().err.startswith("audit: argument --resolution: invalid int value")


# --------------------------------------------------------------------------- #
# spec errors
# --------------------------------------------------------------------------- #

def test_unknown_key_suggests_the_near_one():
    with pytest.raises(SpecError, match=r"unknown key\(s\) \['n_sample'\] \(did you mean 'n_samples'\?\)"):
        parse_spec(_minimal(n_sample=3))
    with pytest.raises(SpecError) as e:
        parse_spec(_minimal(n_sample=3, latency_repeat=1))
    assert "'latency_repeat': did you mean 'latency_repeats'?" in str(e.value)
    assert "'n_sample': did you mean 'n_samples'?" in str(e.value)
    with pytest.raises(SpecError) as e:
        parse_spec(_minimal(zzzzzz=1))
    assert "did you mean" not in str(e.value) and "known keys:" in str(e.value)


def test_unknown_key_in_a_file_names_the_file(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(_minimal(n_sample=3)))
    with pytest.raises(SpecError) as e:
        load_spec(f)
    assert str(e.value).startswith(f"spec {f}: unknown key(s) ['n_sample'] (did you mean 'n_samples'?)")


def test_split_error_states_the_value_once():
    with pytest.raises(SpecError) as e:
        parse_spec(_minimal(split="tst"))
    msg = str(e.value)
    assert msg.count("'tst'") == 1 and msg.endswith("(got 'tst')")
    assert "split: must be one of ['train', 'validation', 'calibration', 'test']" in msg
    assert parse_spec(_minimal(split="val")).split == "validation"


# --------------------------------------------------------------------------- #
# doctor
# --------------------------------------------------------------------------- #

CUDA_REQ = 'jax[cuda12]<0.11,>=0.10; extra == "cuda"'
JAX_OWN = ['jaxlib<=0.10.2,>=0.10.2; extra == "cuda12"',
           'jax-cuda12-plugin[with-cuda]<=0.10.2,>=0.10.2; extra == "cuda12"',
           'jax-cuda12-plugin<=0.10.2,>=0.10.2; extra == "cuda12-local"']


def test_cuda_extra_without_plugin_is_not_in_range():
    versions = {"jax": "0.10.2", "jaxlib": "0.10.2"}
    rows = doctor.requirement_checks([CUDA_REQ], extras=["cuda"], version_of=versions.get,
                                     requires_of=lambda name: JAX_OWN if name == "jax" else [])
    (row,) = rows
    assert row["missing"] == ["jax-cuda12-plugin"] and row["in_range"] is None and row["ok"] is True
    text = doctor._text({"passage_jax": "x", "python": "3", "python_executable": "p",
                         "platform": "p", "requirements": rows, "ok": True,
                         "jax": {"backend": "cpu", "device_count": 0, "devices": [],
                                 "float64": True, "float64_detail": "d"},
                         "compilation_cache": {"path": "c", "switched_off": True}})
    line = next(ln for ln in text.splitlines() if "[cuda]" in ln)
    assert "no CUDA plugin is installed (jax-cuda12-plugin missing" in line
    assert "in range" not in line
    # with the plugin installed the same row is in range
    versions["jax-cuda12-plugin"] = "0.10.2"
    (row,) = doctor.requirement_checks([CUDA_REQ], extras=["cuda"], version_of=versions.get,
                                       requires_of=lambda name: JAX_OWN)
    assert row["in_range"] is True and "missing" not in row


def test_doctor_json_lists_every_runtime_dependency():
    report = doctor.collect()
    runtime = [r["name"] for r in report["requirements"] if r["extra"] is None]
    assert {"matplotlib", "packaging"} <= set(runtime)
    for name in runtime:
        assert name in report["packages"], name
        assert report["packages"][name] == doctor.installed_version(name)


# --------------------------------------------------------------------------- #
# init-spec and compare's procedure limits
# --------------------------------------------------------------------------- #

#: spec fields that make up compare's procedure limits, and the task selection
SHARED = ("latency_warmup", "latency_repeats", "quality_repeat_index", "budget", "device",
          "timing_profile", "execution", "resolution", "split", "cost_model", "task_variant",
          "n_samples", "seeds", "dataset_path")


@pytest.mark.parametrize("baseline", ["bfs", "greedy", "exact"])
def test_starter_spec_agrees_with_the_baselines(baseline):
    starter = parse_spec(yaml.safe_load(STARTER_SPEC)).to_dict()
    base = load_spec(ROOT / "configs" / f"{baseline}.yaml").to_dict()
    differ = {k: (starter[k], base[k]) for k in SHARED if starter[k] != base[k]}
    assert not differ


def test_starter_spec_search_limit_matches_bounded():
    starter = parse_spec(yaml.safe_load(STARTER_SPEC))
    bounded = load_spec(ROOT / "configs" / "bounded.yaml")
    assert starter.inference == bounded.inference
    assert starter.inference_kwargs == bounded.inference_kwargs


def test_compare_warns_when_limits_differ(capsys):
    from cli.compare import print_limits

    a = {"budget": {}, "deadline_ms": None, "latency_warmup": 1, "latency_repeats": 2,
         "quality_repeat_index": 0, "timing_boundary": "in_process", "timer": "t", "device": None}
    b = dict(a, budget={"max_expansions": 20000}, latency_repeats=1)
    print_limits({"procedure_limits": {"A": a, "B": b, "differ": ["budget", "latency_repeats"]}})
    out = capsys.readouterr().out.splitlines()
    assert out == ['warning: procedure limits differ: budget, latency_repeats (budget: A {} vs B '
                   '{"max_expansions": 20000}; latency_repeats: A 2 vs B 1); the runs were not '
                   'measured under the same procedure (--require-identical-limits refuses such a '
                   'pair)']
    print_limits({"procedure_limits": {"A": a, "B": a, "differ": []}})
    assert capsys.readouterr().out == ""
