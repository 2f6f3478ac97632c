"""The Open OnDemand app's traps, each run for real without Slurm: the rendered script.sh in a clean
batch-like shell (a fake conda, a fake course), the job wrapper on a node without a port probe, and
the form's site settings as OnDemand reads them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import yaml

from tests.slurm.cluster import REPO
from tests.slurm.ood_app import APP, JOB_WRAPPER, form_values, native_arguments, render

# A conda whose `shell.bash hook` defines `conda activate`, which sources the env's activation
# script (as conda does) and puts its bin/ first on PATH; a missing env fails as conda's does.
FAKE_CONDA = """#!/usr/bin/env bash
[[ "$1 $2" == "shell.bash hook" ]] || exit 2
cat <<'HOOK'
conda() {
  local env="{envs}/$2"
  [[ "$1" == activate ]] || return 0
  [[ -d "$env" ]] || { echo "EnvironmentNameNotFound: Could not find conda environment: $2" >&2; return 1; }
  source "$env/etc/conda/activate.d/env.sh"
  export PATH="$env/bin:$PATH"
}
HOOK
"""
# Like many packages' activation scripts: reads a variable that is usually unset.
ACTIVATION_SCRIPT = 'if [ -n "$COURSE_TEST_UNSET_VARIABLE" ]; then echo set; fi\n'


def fake_conda(root: Path, env_name: str | None) -> Path:
    """A bin/ folder holding conda, and (if env_name) that env with a python running the course's."""
    bin_dir, envs = root / "conda-bin", root / "envs"
    bin_dir.mkdir(parents=True)
    (bin_dir / "conda").write_text(FAKE_CONDA.replace("{envs}", str(envs)))
    (bin_dir / "conda").chmod(0o755)
    if env_name:
        env = envs / env_name
        (env / "etc" / "conda" / "activate.d").mkdir(parents=True)
        (env / "etc" / "conda" / "activate.d" / "env.sh").write_text(ACTIVATION_SCRIPT)
        (env / "bin").mkdir()
        (env / "bin" / "python").write_text(f'#!/bin/sh\nexec "{REPO}/.venv/bin/python" "$@"\n')
        (env / "bin" / "python").chmod(0o755)
    return bin_dir


def batch_env(tmp_path: Path, path: str = "/usr/bin:/bin") -> dict:
    """What a batch job's script.sh starts with: no profile, no inherited functions."""
    return {"PATH": path, "HOME": str(tmp_path / "home"), "COURSE_SESSION_DIR": str(tmp_path / "jupyter"),
            "host": "localhost", "port": "1", "password": "x"}


def run_script(values: dict, tmp_path: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    staged = render(values, tmp_path / "session") / "template"
    (tmp_path / "home").mkdir(parents=True, exist_ok=True)
    return subprocess.run(["bash", str(staged / "script.sh")], capture_output=True, text=True, timeout=120,
                          env=env or batch_env(tmp_path), cwd=staged)


def fake_course(tmp_path: Path) -> Path:
    """The course's scripts and released notebooks, with a .venv whose python and jupyter do nothing."""
    course = tmp_path / "course"
    shutil.copytree(REPO / "slurm", course / "slurm")
    shutil.copytree(REPO / "notebooks", course / "notebooks")
    bin_dir = course / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, body in (("python", "cat >/dev/null\n"), ("jupyter", 'echo "fake jupyter $*"\n')):
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    return course


def test_tilde_working_dir_means_the_home_on_the_node(tmp_path):
    result = run_script(form_values("~/no such course"), tmp_path)
    assert result.returncode == 1
    assert f"'{tmp_path}/home/no such course' does not exist" in result.stderr, result.stderr


def test_first_launch_copies_the_released_chapters_and_never_overwrites(tmp_path):
    course = fake_course(tmp_path)
    released = sorted(path.name for path in (course / "notebooks").iterdir() if path.is_dir())
    result = run_script(form_values("", course_dir=str(course)), tmp_path)
    assert result.returncode == 0 and "fake jupyter lab" in result.stdout, result.stderr
    default = tmp_path / "home" / "distributed-course"
    assert sorted(path.name for path in default.iterdir()) == released

    mine = tmp_path / "mine"
    (mine / released[0]).mkdir(parents=True)
    (mine / released[0] / "answers.ipynb").write_text("my answers")
    result = run_script(form_values(mine, course_dir=str(course)), tmp_path)
    assert result.returncode == 0, result.stderr
    assert sorted(path.name for path in mine.iterdir()) == released
    assert [path.name for path in (mine / released[0]).iterdir()] == ["answers.ipynb"]
    assert (mine / released[0] / "answers.ipynb").read_text() == "my answers"


def test_conda_env_activates_under_set_u_and_says_why_when_it_cannot(tmp_path):
    course = tmp_path / "course"
    shutil.copytree(REPO / "slurm", course / "slurm")
    (course / "environment.yml").write_text("name: course-env\n")
    values = form_values(tmp_path / "no such folder", course_dir=str(course))
    conda_bin = fake_conda(tmp_path / "with-env", "course-env")
    result = run_script(values, tmp_path, batch_env(tmp_path, f"{conda_bin}:/usr/bin:/bin"))
    # Activated: it went on to the (missing) working directory.
    assert "no such folder' does not exist" in result.stderr, result.stderr

    conda_bin = fake_conda(tmp_path / "without-env", None)
    result = run_script(values, tmp_path, batch_env(tmp_path, f"{conda_bin}:/usr/bin:/bin"))
    assert result.returncode == 1
    assert "Could not find conda environment: course-env" in result.stderr, result.stderr
    assert "conda env create -f" in result.stderr, result.stderr


def test_site_settings_are_fixed_so_cached_values_cannot_override_them():
    form = yaml.safe_load((APP / "form.yml").read_text())
    for name in ("course_dir", "modules", "portal_origin"):
        assert name in form["form"], name
        # A plain value is what OnDemand treats as fixed by the app: no widget, never cached per user.
        assert isinstance(form["attributes"][name], str), f"{name}: {form['attributes'][name]!r}"


def test_memory_is_a_form_field_and_part_of_the_submission(tmp_path):
    default_gb = yaml.safe_load((APP / "form.yml").read_text())["attributes"]["memory_gb"]["value"]
    assert default_gb >= 8, "a kernel and four rank processes need several GB"
    rendered = render(form_values(tmp_path, memory_gb=str(default_gb)), tmp_path / "session")
    assert f"--mem={default_gb}G" in native_arguments(rendered)


def test_portal_origin_comes_from_the_portals_host_names(tmp_path):
    env = dict(os.environ, ALLOWED_HOSTS="ondemand.example.edu,ood.example.edu")
    rendered = render(form_values(tmp_path, portal_origin=""), tmp_path / "session", env=env)
    script = (rendered / "template" / "script.sh").read_text()
    assert r"PORTAL_ORIGINS=https://ondemand.example.edu\ https://ood.example.edu" in script

    # Neither: the session stops with what to set, instead of a JupyterLab that refuses every kernel.
    result = run_script(form_values(tmp_path, portal_origin=""), tmp_path / "unknown")
    assert result.returncode == 1, result.stderr
    assert "set portal_origin in the app's form.yml" in result.stderr, result.stderr


NEVER_LISTENS = '#!/usr/bin/env bash\nexec sleep 120\n'


def test_session_without_a_port_probe_says_so(tmp_path):
    """OnDemand's port_used answers 127 when the node has none of its probes: say so, do not wait."""
    staged = render(form_values(tmp_path), tmp_path / "session") / "template"
    (staged / "script.sh").write_text(NEVER_LISTENS)
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text(JOB_WRAPPER.read_text().replace("port_used() {", "port_used() {\n    return 127", 1))
    started = time.monotonic()
    result = subprocess.run(["bash", str(wrapper), str(staged)], capture_output=True, text=True, timeout=60,
                            env=dict(os.environ, COURSE_LAB_START_TIMEOUT_S="60"))
    assert result.returncode == 1 and "none of its probes" in result.stderr, result.stderr
    assert time.monotonic() - started < 20, "it waited for a port it could never see"
    assert not (staged / "connection.yml").exists()
