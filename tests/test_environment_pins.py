"""environment.yml (clusters, Open OnDemand) and pyproject.toml (laptops, CI) name the same packages
with the same version floors, so a course that works on one works on the other."""

import subprocess
import sys
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent


def version_floor(requirement: Requirement) -> str | None:
    for spec in requirement.specifier:
        if spec.operator in (">=", "==", "~="):
            return spec.version
    return None


def pyproject_requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {Requirement(r).name.lower(): Requirement(r) for r in project["dependencies"]}


def environment_requirements() -> dict[str, Requirement]:
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_lists = [entry["pip"] for entry in environment["dependencies"] if isinstance(entry, dict)]
    assert len(pip_lists) == 1, "environment.yml should have exactly one pip: section"
    return {Requirement(r).name.lower(): Requirement(r) for r in pip_lists[0] if not r.startswith("-")}


def test_same_package_names():
    in_pyproject, in_environment = set(pyproject_requirements()), set(environment_requirements())
    assert in_pyproject == in_environment, (
        f"only in pyproject.toml: {sorted(in_pyproject - in_environment)}; "
        f"only in environment.yml: {sorted(in_environment - in_pyproject)}")


def test_same_version_floors():
    environment = environment_requirements()
    for name, requirement in pyproject_requirements().items():
        assert version_floor(requirement) == version_floor(environment[name]), (
            f"{name}: pyproject.toml says {requirement.specifier}, environment.yml says "
            f"{environment[name].specifier}; give both the same lower bound")


def test_runtime_environment_leaves_the_test_tools_out():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    test_tools = {Requirement(r).name.lower() for r in project["optional-dependencies"]["test"]}
    shipped = sorted(set(environment_requirements()) & test_tools)
    assert not shipped, f"environment.yml installs test tools a site's runtime does not need: {shipped}"


def test_cuda_advice_keeps_pypi():
    text = (ROOT / "environment.yml").read_text()
    assert "--extra-index-url" in text
    assert "--index-url" not in text.replace("--extra-index-url", ""), "--index-url replaces PyPI"


def test_environment_installs_the_course_package_and_python_311():
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert "python=3.11" in environment["dependencies"]
    pip_list = next(e["pip"] for e in environment["dependencies"] if isinstance(e, dict))
    assert "-e ." in pip_list, "environment.yml must install course_lib itself (-e .)"


def test_the_test_tools_bring_the_hub_extra():
    """`make setup` installs [test], which must pull the class hub's packages, or tests/hub cannot run;
    the runtime (environment.yml) leaves them to `pip install -e '.[hub]'` (docs/jupyterhub.md)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {Requirement(r).name for r in extras["hub"]} == {"jupyterhub", "batchspawner"}
    assert any(Requirement(r).name == "course-lib" and "hub" in Requirement(r).extras for r in extras["test"])
    assert ".[hub]" in (ROOT / "environment.yml").read_text()


def test_reading_a_notebook_does_not_build_a_grammar():
    """`make setup` removes rfc3987-syntax (Makefile): jsonschema imports it whenever it is installed, and
    it builds a lark grammar at import, 1.7 s in every grading process that reads a notebook."""
    probe = "import sys, nbformat; print('rfc3987_syntax' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "False", "pip uninstall rfc3987-syntax lark (make setup does)"
