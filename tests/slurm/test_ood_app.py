"""The Open OnDemand app in slurm/ood: its ERB templates rendered with Ruby for sample form values,
then the rendered session submitted to the local Slurm, where JupyterLab must answer on the chosen
port, with the generated password, and offer the course kernel.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from conftest import skip_or_fail
from tests.slurm.cluster import REPO

APP = REPO / "slurm" / "ood"
RENDERER = Path(__file__).with_name("ood_render.rb")
JOB_WRAPPER = Path(__file__).with_name("ood_job_wrapper.sh")


def form_values(working_dir: Path, num_gpus: int) -> dict:
    return {"bc_account": "", "bc_queue": "", "num_cores": "2", "num_gpus": str(num_gpus),
            "bc_num_hours": "1", "working_dir": str(working_dir), "course_dir": str(REPO), "modules": "",
            "bc_email_on_started": "0",
            # connection values the dashboard passes to view.html.erb
            "host": "node01", "port": "8123", "password": "s3cret"}


def render(values: dict, out_dir: Path) -> Path:
    if shutil.which("ruby") is None:
        skip_or_fail("ruby not found; install with: apt-get install ruby")
    values_file = out_dir / "values.json"
    out_dir.mkdir(parents=True, exist_ok=True)
    values_file.write_text(json.dumps(values))
    result = subprocess.run(["ruby", str(RENDERER), str(APP), str(out_dir), str(values_file)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return out_dir


def native_arguments(rendered: Path) -> list[str]:
    return yaml.safe_load((rendered / "submit.yml").read_text())["script"]["native"]


@pytest.mark.slurm
def test_templates_render_to_valid_submission_and_scripts(tmp_path):
    cpu = render(form_values(tmp_path, num_gpus=0), tmp_path / "cpu")
    gpu = render(form_values(tmp_path, num_gpus=2), tmp_path / "gpu")
    assert yaml.safe_load((cpu / "submit.yml").read_text())["batch_connect"]["template"] == "basic"
    assert native_arguments(cpu) == ["--nodes=1", "--ntasks=1", "--cpus-per-task=2"]
    assert native_arguments(gpu) == [*native_arguments(cpu), "--gpus-per-node=2"]

    script = (cpu / "template" / "script.sh").read_text()
    assert "NotebookApp" not in script and "ServerApp.base_url" in script
    assert "IdentityProvider.token" in script and "PasswordIdentityProvider.hashed_password" in script
    assert f"COURSE_DIR={REPO}" in script and "NUM_GPUS=0" in script
    executable = (cpu / "template" / "script.sh").stat().st_mode & 0o111
    assert executable, "OnDemand forks script.sh: it must be executable"
    assert 'href="/node/node01/8123/lab?token=s3cret"' in (cpu / "view.html").read_text()
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
    values = dict(form_values(tmp_path / "no such folder", num_gpus=0), modules="fake/1.0 other/2")
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


def open_url(opener, url: str, data: dict | None = None) -> tuple[int, str, bytes]:
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    try:
        with opener.open(url, data=body, timeout=20) as response:
            return response.status, response.geturl(), response.read()
    except urllib.error.HTTPError as error:
        return error.code, url, error.read()


def browser():
    jar = http.cookiejar.CookieJar()
    return urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar)), jar


def wait_for_connection_file(local_slurm, job_id: str, staged: Path, timeout: float = 150) -> dict:
    """connection.yml appears once JupyterLab listens (after.sh waits for the port)."""
    deadline = time.monotonic() + timeout
    connection = staged / "connection.yml"
    while not connection.exists():
        state = local_slurm.job_fields(job_id).get("JobState")
        if state not in {"PENDING", "RUNNING", "CONFIGURING"} or time.monotonic() > deadline:
            output = local_slurm.wait(job_id, timeout=5) if state != "RUNNING" else None
            log = output.output if output else ""
            pytest.fail(f"no connection.yml from job {job_id} ({state}):\n{log}")
        time.sleep(0.5)
    time.sleep(0.2)  # written in one printf; let it land
    return yaml.safe_load(connection.read_text())


@pytest.mark.slurm
@pytest.mark.slow
def test_session_serves_jupyterlab_with_the_generated_password(local_slurm, tmp_path):
    working_dir = tmp_path / "my notebooks"
    working_dir.mkdir()
    (working_dir / "hello.txt").write_text("hi")
    rendered = render(form_values(working_dir, num_gpus=0), tmp_path / "session")
    staged = rendered / "template"
    hours = int(form_values(working_dir, 0)["bc_num_hours"])
    job_id = local_slurm.submit(JOB_WRAPPER, *native_arguments(rendered), f"--time={hours * 60}",
                                f"--output={rendered}/output.log", cwd=tmp_path, script_args=(str(staged),))
    try:
        connection = wait_for_connection_file(local_slurm, job_id, staged)
        host, port, password = connection["host"], int(connection["port"]), str(connection["password"])
        assert re.fullmatch(r"[A-Za-z0-9]{32}", password), "before.sh must generate a 32-character password"
        base = f"http://127.0.0.1:{port}/node/{host}/{port}/"

        stranger, _ = browser()
        assert open_url(stranger, base + "api/contents")[0] == 403
        assert open_url(stranger, base + "lab?token=wrong-password")[1].startswith(base + "login")

        # The dashboard's Connect link: the password as token logs the browser in.
        student, _ = browser()
        assert open_url(student, base + f"lab?token={password}")[0] == 200
        status, _, body = open_url(student, base + "api/kernelspecs")
        kernels = json.loads(body)
        assert status == 200 and kernels["default"] == "distributed-course", kernels
        spec = kernels["kernelspecs"]["distributed-course"]["spec"]
        assert spec["display_name"] == "Python 3 (distributed course)"
        status, _, body = open_url(student, base + "api/contents")
        assert status == 200 and [item["name"] for item in json.loads(body)["content"]] == ["hello.txt"]

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
