"""pyproject.toml declares ranges; constraints.txt pins, inside them, what CI installs."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

Requirement = pytest.importorskip("packaging.requirements").Requirement
Version = pytest.importorskip("packaging.version").Version
try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
LOWER, UPPER = {">=", ">", "~="}, {"<", "<=", "~="}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def project():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def constraints() -> dict[str, str]:
    pins = {}
    for i, line in enumerate((ROOT / "constraints.txt").read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][0-9A-Za-z.+!-]*)", line)
        assert m, f"constraints.txt line {i}: not 'name==version': {line!r}"
        name = normalise(m.group(1))
        assert name not in pins, f"constraints.txt line {i}: {name} pinned twice"
        pins[name] = m.group(2)
    return pins


def declared() -> list[tuple[str, Requirement]]:
    p = project()
    out = [("runtime", Requirement(r)) for r in p["dependencies"]]
    for extra, reqs in p.get("optional-dependencies", {}).items():
        out += [(extra, Requirement(r)) for r in reqs]
    return out


def test_runtime_dependencies_are_ranges_not_pins():
    reqs = [Requirement(r) for r in project()["dependencies"]]
    assert reqs
    for req in reqs:
        ops = {s.operator for s in req.specifier}
        assert not ops & {"==", "==="}, f"{req}: an exact pin belongs in constraints.txt"
        assert ops & LOWER and ops & UPPER, f"{req}: needs a lower and an upper bound"


def test_every_declared_package_is_pinned_inside_its_range():
    pins = constraints()
    for where, req in declared():
        name = normalise(req.name)
        assert name in pins, f"{where} requirement {req} is not pinned in constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"{where} requirement {req}: the pin {name}=={pins[name]} is outside the range"
        Version(pins[name])  # a real version


def test_the_extras_are_declared():
    extras = project()["optional-dependencies"]
    assert any(normalise(Requirement(r).name) == "huggingface-hub" for r in extras["hub"])
    assert any(normalise(Requirement(r).name) == "huggingface-hub" for r in extras["test"])
    cuda = [Requirement(r) for r in extras["cuda"]]
    assert any(r.name == "jax" and "cuda12" in r.extras for r in cuda)
    # the cuda extra and the runtime dependency accept the same JAX versions
    runtime_jax = next(Requirement(r) for r in project()["dependencies"] if Requirement(r).name == "jax")
    assert {str(r.specifier) for r in cuda if r.name == "jax"} == {str(runtime_jax.specifier)}


def test_ci_and_readme_install_with_the_constraints():
    ci = (ROOT / ".ci" / "run").read_text()
    installs = [line for line in ci.splitlines() if "pip install" in line and "-e" in line]
    assert installs and all("-c constraints.txt" in line for line in installs)
