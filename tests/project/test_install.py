"""pyproject.toml declares ranges; the two constraints files pin, inside them, what CI
installs: constraints.txt (Python 3.11, JAX 0.10.2, the oldest tested line) and
constraints-py312.txt (Python 3.12, JAX 0.12, the newest)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

Requirement = pytest.importorskip("packaging.requirements").Requirement
Version = pytest.importorskip("packaging.version").Version
SpecifierSet = pytest.importorskip("packaging.specifiers").SpecifierSet
try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]
LOWER, UPPER = {">=", ">", "~="}, {"<", "<=", "~="}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def project():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


#: constraints file -> the extras it does not pin (cuda13 needs JAX >= 0.11; the newest
#: environment leaves out torch, tested in the Python 3.11 one)
CONSTRAINTS = {"constraints.txt": {"cuda13"}, "constraints-py312.txt": {"torch"}}


def constraints(name: str = "constraints.txt") -> dict[str, str]:
    pins = {}
    for i, line in enumerate((ROOT / name).read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][0-9A-Za-z.+!-]*)", line)
        assert m, f"{name} line {i}: not 'name==version': {line!r}"
        package = normalise(m.group(1))
        assert package not in pins, f"{name} line {i}: {package} pinned twice"
        pins[package] = m.group(2)
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


@pytest.mark.parametrize("file", sorted(CONSTRAINTS))
def test_every_declared_package_is_pinned_inside_its_range(file):
    pins = constraints(file)
    for where, req in declared():
        if where in CONSTRAINTS[file]:
            continue
        name = normalise(req.name)
        assert name in pins, f"{where} requirement {req} is not pinned in {file}"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"{where} requirement {req}: the pin {name}=={pins[name]} is outside the range"
        Version(pins[name])  # a real version
        for extra in req.extras:  # jax[cuda13]: its plugin is pinned at the same version
            if extra.startswith("cuda") and name == "jax":
                assert pins.get(f"jax-{extra}-plugin") == pins["jax"], (file, extra)


def test_the_two_environments_are_the_oldest_and_newest_tested():
    old, new = constraints("constraints.txt"), constraints("constraints-py312.txt")
    assert Version(old["jax"]) < Version("0.11") <= Version("0.12") <= Version(new["jax"])
    assert old["jax"] == old["jaxlib"] and new["jax"] == new["jaxlib"]
    python = SpecifierSet(project()["requires-python"])
    assert all(v in python for v in ("3.11", "3.12", "3.13")) and "3.10" not in python


def test_filelock_is_a_runtime_dependency():
    """JAX reads no entry of a bounded compilation cache without filelock
    (passage_jax.compilation): the README's plain install must bring it."""
    names = {normalise(Requirement(r).name) for r in project()["dependencies"]}
    assert "filelock" in names


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
    assert installs and all(re.search(r"-c (\"\$\w+\"|constraints(-py312)?\.txt)", line)
                            for line in installs)
    for file in CONSTRAINTS:  # CI installs each tested environment
        assert file in ci, file
