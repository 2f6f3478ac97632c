"""The Open OnDemand app in slurm/ood: its ERB templates rendered with Ruby for sample form values,
then the rendered session submitted to the local Slurm, where JupyterLab must answer on the chosen
port, with the generated password, and offer the course kernel.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import skip_or_fail
from tests.slurm.cluster import REPO
from tests.slurm.ood_app import (
    JOB_WRAPPER,
    PORTAL_ORIGIN,
    browser,
    form_values,
    native_arguments,
    open_url,
    render,
    submit_session,
    wait_for_connection_file,
)


@pytest.mark.slurm
def test_templates_render_to_valid_submission_and_scripts(tmp_path):
    cpu = render(form_values(tmp_path, num_gpus=0), tmp_path / "cpu")
    gpu = render(form_values(tmp_path, num_gpus=2), tmp_path / "gpu")
    assert yaml.safe_load((cpu / "submit.yml").read_text())["batch_connect"]["template"] == "basic"
    assert native_arguments(cpu) == ["--nodes=1", "--ntasks=1", "--cpus-per-task=2", "--mem=2G"]
    assert native_arguments(gpu) == [*native_arguments(cpu), "--gpus-per-node=2"]

    script = (cpu / "template" / "script.sh").read_text()
    assert "NotebookApp" not in script and "ServerApp.base_url" in script
    assert "PasswordIdentityProvider.hashed_password" in script and "ServerApp.allow_origin" in script
    assert f"COURSE_DIR={REPO}" in script and "NUM_GPUS=0" in script
    assert f"PORTAL_ORIGINS={PORTAL_ORIGIN}" in script
    executable = (cpu / "template" / "script.sh").stat().st_mode & 0o111
    assert executable, "OnDemand forks script.sh: it must be executable"
    assert (cpu / "template" / "portal_login.py").exists(), "the login handler is staged with the session"
    for name in ("before.sh", "script.sh", "after.sh"):
        syntax = subprocess.run(["bash", "-n", str(cpu / "template" / name)], capture_output=True, text=True)
        assert syntax.returncode == 0, f"{name}: {syntax.stderr}"
    if shutil.which("shellcheck") is None:
        skip_or_fail("shellcheck not found; install with: apt-get install shellcheck")
    lint = subprocess.run(["shellcheck", "--shell=bash", *map(str, (cpu / "template").glob("*.sh"))],
                          capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0, lint.stdout


@pytest.mark.slurm
def test_script_defines_module_and_loads_the_modules_in_a_batch_shell(tmp_path):
    """A batch shell reads no profile, so script.sh must set up `module` itself (slurm/modules.sh)."""
    values = form_values(tmp_path / "no such folder", modules="fake/1.0 other/2")
    staged = render(values, tmp_path / "session") / "template"
    log, init = tmp_path / "modules.log", tmp_path / "lmod-init.sh"
    init.write_text(f'module() {{ echo "module $*" >>{log}; }}\n')
    # A clean environment as a batch job has: no `module` function inherited, no profile read.
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COURSE_MODULE_INIT": str(init),
           "COURSE_SESSION_DIR": str(tmp_path / "jupyter"), "host": "localhost", "port": "1", "password": "x"}
    result = subprocess.run(["bash", str(staged / "script.sh")], capture_output=True, text=True, timeout=60,
                            env=env, cwd=tmp_path)
    assert log.read_text() == "module load fake/1.0 other/2\n", result.stderr
    # It went on past the modules and the environment, and stopped at the (missing) working directory.
    assert result.returncode == 1 and "no such folder' does not exist" in result.stderr, result.stderr


# script.sh stand-ins: one that never opens its port, one that dies at once.
NEVER_LISTENS = '#!/usr/bin/env bash\necho "$$" >lab.pid\nexec sleep 120\n'
DIES = '#!/usr/bin/env bash\necho "jupyter: something broke" >&2\nexit 5\n'


@pytest.mark.slurm
@pytest.mark.parametrize("stand_in, message", [(NEVER_LISTENS, "did not listen on"),
                                               (DIES, "stopped before it opened port")],
                         ids=["never-listens", "dies"])
def test_session_fails_when_jupyterlab_does_not_listen(tmp_path, stand_in, message):
    """after.sh ends the session (clean_up 1) instead of writing connection.yml for a dead server."""
    staged = render(form_values(tmp_path, num_gpus=0), tmp_path / "session") / "template"
    (staged / "script.sh").write_text(stand_in)
    env = dict(os.environ, COURSE_LAB_START_TIMEOUT_S="3")
    started = time.monotonic()
    result = subprocess.run(["bash", str(JOB_WRAPPER), str(staged)], capture_output=True, text=True,
                            timeout=60, env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert message in result.stderr, result.stderr
    assert not (staged / "connection.yml").exists(), "OnDemand would offer Connect to a dead session"
    assert time.monotonic() - started < 30
    if (staged / "lab.pid").exists():
        pid = int((staged / "lab.pid").read_text())
        for _ in range(50):
            if not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.1)
        assert not Path(f"/proc/{pid}").exists(), "clean_up must stop script.sh"


@pytest.mark.slurm
@pytest.mark.slow
def test_session_serves_jupyterlab_with_the_generated_password(local_slurm, tmp_path):
    working_dir = tmp_path / "my notebooks"
    (working_dir / "00_orientation").mkdir(parents=True)
    answers = working_dir / "00_orientation" / "00_orientation.ipynb"
    answers.write_text("my answers")
    rendered = render(form_values(working_dir), tmp_path / "session")
    staged = rendered / "template"
    job_id = submit_session(local_slurm, rendered, tmp_path)
    try:
        connection = wait_for_connection_file(local_slurm, job_id, staged)
        host, port, password = connection["host"], int(connection["port"]), str(connection["password"])
        assert re.fullmatch(r"[A-Za-z0-9]{32}", password), "before.sh must generate a 32-character password"
        base = f"http://127.0.0.1:{port}/node/{host}/{port}/"
        portal, elsewhere = {"Origin": PORTAL_ORIGIN}, {"Origin": "https://evil.example.com"}

        stranger, _ = browser()
        assert open_url(stranger, base + "api/contents")[0] == 403
        assert open_url(stranger, base + f"lab?token={password}")[1].startswith(base + "login"), \
            "the password must not work as a token in a URL"
        # Another site's page cannot post the login form without Jupyter's _xsrf, even knowing it
        # (Jupyter answers a cross-origin post 404).
        assert open_url(stranger, base + "login", {"password": password}, elsewhere)[0] in {403, 404}
        assert open_url(stranger, base + "api/contents")[0] == 403

        # The dashboard's Connect button: the password posted from the portal's page logs in.
        student, _ = browser()
        status, landed, _ = open_url(student, base + "login", {"password": password}, portal)
        assert status == 200 and landed.startswith(base + "lab"), landed
        assert open_url(browser()[0], base + "login", {"password": "wrong"}, portal)[0] == 401
        status, _, body = open_url(student, base + "api/kernelspecs")
        kernels = json.loads(body)
        assert status == 200 and kernels["default"] == "distributed-course", kernels
        spec = kernels["kernelspecs"]["distributed-course"]["spec"]
        assert spec["display_name"] == "Python 3 (distributed course)"
        # First launch: the released chapters it lacked were copied; the student's own one was kept.
        status, _, body = open_url(student, base + "api/contents")
        released = sorted(path.name for path in (REPO / "notebooks").iterdir() if path.is_dir())
        assert status == 200 and sorted(item["name"] for item in json.loads(body)["content"]) == released
        assert answers.read_text() == "my answers"

        # The password typed into Jupyter's own login form works too (with its XSRF cookie).
        typist, jar = browser()
        open_url(typist, base + "login")
        xsrf = next(cookie.value for cookie in jar if cookie.name == "_xsrf")
        status, landed, _ = open_url(typist, base + "login", {"password": password, "_xsrf": xsrf})
        assert status == 200 and landed.startswith(base + "lab"), landed
    finally:
        local_slurm.cancel(job_id)
    result = local_slurm.wait(job_id, timeout=60)
    assert result.state == "CANCELLED", result.describe()
