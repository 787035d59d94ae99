"""``conform`` on the console names why each failed check failed (one line), and a planner
whose answer is not a route (``None``, a float array) fails conformance by name, while a
planner that states ``no_path`` without a route is a legal answer."""
import json

import fixtures_runner as F
import numpy as np
import pytest
import yaml

from cli.__main__ import main
from passage_jax.protocol.contracts import PlanResult
from passage_jax.run import parse_spec
from passage_jax.run.conform import conform, failure_reason


# planners the specs below name as ``tests.run.test_conform:<name>``
def none_plan(request, **kw):
    """Answers every request with ``None`` (a bare answer: status ok, no route)."""
    return None


def route_key_plan(request, **kw):
    """A mapping with a key the protocol does not know (``route`` instead of ``path``)."""
    from passage_jax.planners.bfs import BFSPlanner

    return {"route": BFSPlanner().plan(request).path}


def float_plan(request, **kw):
    """The BFS route as float coordinates: numeric but not integer cells."""
    from passage_jax.planners.bfs import BFSPlanner

    return np.asarray(BFSPlanner().plan(request).path, np.float64)


def no_path_plan(request, **kw):
    """States that it found no route: a legal answer."""
    return PlanResult(path=None, status="no_path")


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    root = tmp_path_factory.mktemp("cohort")
    F.write_cohort(root)
    return root


def _spec_file(cohort, tmp_path, inference):
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(F.spec_dict(cohort, inference=inference, latency_warmup=0,
                                               latency_repeats=1, quality_repeat_index=0)))
    return spec


def _console(capsys, cohort, tmp_path, inference):
    out = tmp_path / "c"
    rc = main(["conform", "--spec", str(_spec_file(cohort, tmp_path, inference)), "--output", str(out)])
    lines = capsys.readouterr().out.splitlines()
    receipt = json.loads((out / "conformance.json").read_text())
    checks = {ln.split("]", 1)[1].strip().split(":", 1)[0]: ln for ln in lines if ln.startswith("  [")}
    return rc, checks, receipt


def test_none_planner_fails_with_a_named_reason(cohort, tmp_path, capsys):
    rc, lines, receipt = _console(capsys, cohort, tmp_path, "tests.run.test_conform:none_plan")
    assert rc == 1 and receipt["passed"] is False
    by = {c["name"]: c for c in receipt["checks"]}
    for name in ("admitted_task", "analytic_graph"):
        assert by[name]["passed"] is False
        assert "status ok with no route (None)" in by[name]["detail"]["reason"]
        assert lines[name].startswith(f"  [FAIL] {name}: the planner answered status ok with no route (None)")
    # the checks that do not depend on the planner's answer still pass
    assert by["failure_penalties"]["passed"] and by["malformed_coordinates"]["passed"]
    assert lines["failure_penalties"] == "  [pass] failure_penalties"


def test_protocol_violation_reason_is_on_the_console(cohort, tmp_path, capsys):
    rc, lines, receipt = _console(capsys, cohort, tmp_path, "tests.run.test_conform:route_key_plan")
    assert rc == 1
    line = lines["absolute_deadlines"]
    assert line.startswith("  [FAIL] absolute_deadlines: under a spent deadline the planner's "
                           "request ended runtime_error (protocol: result mapping has unknown "
                           "key(s) ['route']")
    assert "\n" not in line and len(line) <= len("  [FAIL] absolute_deadlines: ") + 200
    assert line.endswith("...")  # the full reason is longer; it is whole in the receipt
    full = {c["name"]: c for c in receipt["checks"]}["absolute_deadlines"]["detail"]["reason"]
    assert full.endswith("not timeout") and "known:" in full
    assert lines["admitted_task"].startswith("  [FAIL] admitted_task: the request ended runtime_error "
                                             "(protocol: result mapping has unknown key(s)")


def test_float_route_is_not_a_route_result(cohort, tmp_path, capsys):
    rc, lines, receipt = _console(capsys, cohort, tmp_path, "tests.run.test_conform:float_plan")
    assert rc == 1
    assert lines["admitted_task"].startswith("  [FAIL] admitted_task: the planner's answer is not a "
                                             "route (route format 'float'")


def test_no_path_without_a_route_is_a_legal_answer(cohort, tmp_path):
    spec = parse_spec(F.spec_dict(cohort, inference="tests.run.test_conform:no_path_plan",
                                  latency_warmup=0, latency_repeats=1, quality_repeat_index=0))
    r = conform(spec, tmp_path / "c")
    by = {c["name"]: c for c in r["checks"]}
    assert by["admitted_task"]["passed"] and by["analytic_graph"]["passed"]
    assert by["admitted_task"]["detail"]["status"] == "no_path"
    assert failure_reason(by["admitted_task"]) is None


def test_failure_reason_of_a_receipt_without_reasons():
    assert failure_reason({"passed": False, "detail": {"error": "ValueError: boom"}}) == \
        "the check raised ValueError: boom"
    assert failure_reason({"passed": False, "detail": {"problems": ["a", "b"]}}) == "a; b"
    assert failure_reason({"passed": True, "detail": {}}) is None
