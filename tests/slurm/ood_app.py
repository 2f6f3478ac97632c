"""Helpers the Open OnDemand app's tests share: render slurm/ood as the dashboard does (Ruby ERB),
submit the rendered session to the local Slurm and wait for its connection.yml, talk HTTP to it.
"""

from __future__ import annotations

import http.cookiejar
import json
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
# The portal's origin in tests that do not run one (the proxied test passes its own).
PORTAL_ORIGIN = "https://ondemand.example.edu"


def form_values(working_dir: Path | str, num_gpus: int = 0, **changes: str) -> dict:
    values = {"bc_account": "", "bc_queue": "", "num_cores": "2", "memory_gb": "2", "num_gpus": str(num_gpus),
              "bc_num_hours": "1", "working_dir": str(working_dir), "course_dir": str(REPO), "modules": "",
              "portal_origin": PORTAL_ORIGIN, "bc_email_on_started": "0",
              # connection values the dashboard passes to view.html.erb
              "host": "node01", "port": "8123", "password": "s3cret"}
    return dict(values, **changes)


def render(values: dict, out_dir: Path, env: dict | None = None) -> Path:
    """The app rendered into ``out_dir`` (submit.yml, view.html, template/); ``env`` is the PUN's."""
    if shutil.which("ruby") is None:
        skip_or_fail("ruby not found; install with: apt-get install ruby")
    values_file = out_dir / "values.json"
    out_dir.mkdir(parents=True, exist_ok=True)
    values_file.write_text(json.dumps(values))
    result = subprocess.run(["ruby", str(RENDERER), str(APP), str(out_dir), str(values_file)],
                            capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    return out_dir


def native_arguments(rendered: Path) -> list[str]:
    return yaml.safe_load((rendered / "submit.yml").read_text())["script"]["native"]


def submit_session(local_slurm, rendered: Path, cwd: Path, env: dict | None = None) -> str:
    """sbatch the job wrapper around the rendered app, as OnDemand's "basic" template would."""
    return local_slurm.submit(JOB_WRAPPER, *native_arguments(rendered), "--time=60",
                              f"--output={rendered}/output.log", cwd=cwd, env=env,
                              script_args=(str(rendered / "template"),))


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


def open_url(opener, url: str, data: dict | None = None, headers: dict | None = None) -> tuple:
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    request = urllib.request.Request(url, data=body, headers=headers or {})
    try:
        with opener.open(request, timeout=20) as response:
            return response.status, response.geturl(), response.read()
    except urllib.error.HTTPError as error:
        return error.code, url, error.read()


def browser():
    jar = http.cookiejar.CookieJar()
    return urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar)), jar
