"""``python -m cli doctor``: versions against the declared ranges, JAX backend, float64."""
from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from cli import doctor
from cli.__main__ import main as cli_main
from passage_jax import __version__

ROOT = Path(__file__).resolve().parents[2]


def _name(requirement: str) -> str:
    """Distribution name of a requirement string, without packaging."""
    return re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0]


def _runtime(requires):
    return [r for r in requires if "extra ==" not in r.replace("'", '"')]


@pytest.fixture(scope="module")
def cli_json():
    proc = subprocess.run([sys.executable, "-m", "cli", "doctor", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout)


def test_json_agrees_with_importlib_metadata(cli_json):
    rc, report = cli_json
    requires = importlib.metadata.requires("passage_jax")
    rows = report["requirements"]
    runtime = [r for r in rows if r["extra"] is None]
    assert [r["name"] for r in runtime] == [_name(r) for r in _runtime(requires)]
    assert len(rows) == len(requires)  # every declared requirement has its row
    for r in rows:
        try:
            want = importlib.metadata.version(r["name"])
        except importlib.metadata.PackageNotFoundError:
            want = None
        assert r["installed"] == want, r
    assert report["passage_jax"] == importlib.metadata.version("passage_jax") == __version__
    assert report["python"] == ".".join(map(str, sys.version_info[:3]))
    for name, v in report["packages"].items():
        assert v == importlib.metadata.version(name), name
    assert rc == (0 if all(r["in_range"] for r in runtime) else 1) and report["ok"] == (rc == 0)


def test_json_agrees_with_jax_devices(cli_json):
    _, report = cli_json
    j = report["jax"]
    assert j["backend"] == jax.default_backend()
    assert [(d["id"], d["platform"]) for d in j["devices"]] == [(d.id, d.platform) for d in jax.devices()]
    assert j["device_count"] == jax.device_count()
    if jax.default_backend() == "cpu":
        assert j["float64"] is True


def test_hand_worked_ranges():
    requires = ["jax<0.11,>=0.10", "numpy<3,>=2.4", "missing-pkg>=1", 'hubpkg<3,>=2.4; extra == "hub"',
                'otherpkg>=1; extra == "bench"', 'winonly>=1; sys_platform == "nonexistent"']
    versions = {"jax": "0.11.0", "numpy": "2.4.0", "hubpkg": "2.3.9"}
    rows = doctor.requirement_checks(requires, extras=["hub", "bench"], version_of=versions.get)
    got = {(r["name"], r["extra"]): (r["installed"], r["in_range"], r["ok"]) for r in rows}
    assert got == {
        ("jax", None): ("0.11.0", False, False),  # the upper bound excludes the next minor
        ("numpy", None): ("2.4.0", True, True),
        ("missing-pkg", None): (None, None, False),  # a missing runtime dependency is a failure
        ("hubpkg", "hub"): ("2.3.9", False, False),  # an installed extra is checked too
        ("otherpkg", "bench"): (None, None, True),  # an extra not installed is not
    }
    rows = doctor.requirement_checks(["jax<0.11,>=0.10"], extras=[], version_of={"jax": "0.10.7"}.get)
    assert rows[0]["in_range"] is True and rows[0]["specifier"] == ">=0.10,<0.11"


def test_out_of_range_version_is_reported(monkeypatch, capsys):
    real = doctor.installed_version
    monkeypatch.setattr(doctor, "installed_version",
                        lambda name: "0.9.2" if name == "jax" else real(name))
    assert cli_main(["doctor", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    bad = [r for r in report["requirements"] if r["in_range"] is False]
    assert {(r["name"], r["installed"]) for r in bad} == {("jax", "0.9.2")}  # runtime and [cuda]
    assert cli_main(["doctor"]) == 1
    text = capsys.readouterr().out
    jax_line = next(line for line in text.splitlines() if line.split()[:1] == ["jax"])
    assert "0.9.2" in jax_line and "OUT OF RANGE" in jax_line


def test_version_flag(capsys):
    with pytest.raises(SystemExit) as e:
        cli_main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"passage_jax {__version__}"
