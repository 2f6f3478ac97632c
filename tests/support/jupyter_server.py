"""Start a JupyterLab server on loopback for a test and always stop it again.

The server gets a free port, its own token and runtime folder, so tests and a student's own
JupyterLab on the same machine never collide.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path


@dataclass
class RunningLab:
    base_url: str
    token: str
    process: subprocess.Popen

    def url(self, path: str = "lab") -> str:
        return f"{self.base_url}/{path.lstrip('/')}?token={self.token}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def wait_until_answering(url: str, process: subprocess.Popen, log_path: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log_tail = log_path.read_text()[-3000:]
            raise RuntimeError(f"JupyterLab exited with {process.returncode}:\n{log_tail}")
        if http_status(url) == 200:
            return
        time.sleep(0.5)
    raise TimeoutError(f"JupyterLab did not answer {url} within {timeout} s:\n{log_path.read_text()[-3000:]}")


def stop(process: subprocess.Popen) -> None:
    """Stop the server and everything it started (kernels, rank processes)."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)


@contextlib.contextmanager
def running_jupyterlab(root_dir: Path, scratch: Path, extra_args: tuple[str, ...] = ()):
    """JupyterLab serving ``root_dir``; its log goes to ``scratch``/jupyterlab.log."""
    port, token = free_port(), secrets.token_hex(16)
    log_path = scratch / "jupyterlab.log"
    environment = dict(os.environ, JUPYTER_RUNTIME_DIR=str(scratch / "runtime"))
    environment.pop("MPLBACKEND", None)  # the browser should show figures, whatever the tests set
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
               f"--ServerApp.root_dir={root_dir}", f"--LabApp.workspaces_dir={scratch / 'workspaces'}",
               f"--LabApp.user_settings_dir={scratch / 'settings'}", *extra_args]
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment,
                                   start_new_session=True)
    lab = RunningLab(f"http://127.0.0.1:{port}", token, process)
    try:
        wait_until_answering(lab.url("api/status"), process, log_path)
        yield lab
    finally:
        stop(process)


LAB_URL = re.compile(r"(http://127\.0\.0\.1:\d+)/lab\?token=([0-9a-f]+)")


@contextlib.contextmanager
def make_lab(checkout: Path, scratch: Path, *make_args: str):
    """`make lab` run in checkout on a free loopback port, headless; yields (base URL, token)."""
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    environment["JUPYTER_RUNTIME_DIR"] = str(scratch / "runtime")
    log_path = scratch / "make-lab.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(["make", "lab", f"PORT={port}", "IP=127.0.0.1", *make_args],
                                   cwd=checkout, stdout=log, stderr=subprocess.STDOUT, env=environment,
                                   start_new_session=True)
    try:
        deadline, match = time.monotonic() + 180, None
        while match is None and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.5)
            match = LAB_URL.search(log_path.read_text())
        assert match, f"make lab printed no URL with a token:\n{log_path.read_text()[-3000:]}"
        base, token = match.groups()
        assert base.endswith(f":{port}")
        # The first page of a fresh JupyterLab can take longer than one request's timeout on a busy
        # machine: ask again until it answers 200 (or the server exits, or a minute passes).
        wait_until_answering(f"{base}/lab?token={token}", process, log_path, timeout=60)
        yield base, token
    finally:
        stop(process)
