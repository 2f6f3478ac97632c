"""The README's first command, `make lab`, ends with JupyterLab serving the course on a headless machine."""

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.jupyter_server import free_port, http_status, stop, wait_until_answering

ROOT = Path(__file__).resolve().parent.parent
URL_PATTERN = re.compile(r"(http://127\.0\.0\.1:\d+)/lab\?token=([0-9a-f]+)")


@pytest.mark.slow
def test_make_lab_serves_the_course_headless(tmp_path):
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    environment["JUPYTER_RUNTIME_DIR"] = str(tmp_path / "runtime")
    log_path = tmp_path / "make-lab.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(["make", "lab", f"PORT={port}", "IP=127.0.0.1"], cwd=ROOT, stdout=log,
                                   stderr=subprocess.STDOUT, env=environment, start_new_session=True)
    try:
        deadline, match = time.monotonic() + 180, None
        while match is None and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.5)
            match = URL_PATTERN.search(log_path.read_text())
        assert match, f"make lab printed no URL with a token:\n{log_path.read_text()[-3000:]}"
        base, token = match.groups()
        assert base.endswith(f":{port}")
        # The first page of a fresh JupyterLab can take longer than one request's timeout on a busy
        # machine: ask again until it answers 200 (or the server exits, or a minute passes).
        wait_until_answering(f"{base}/lab?token={token}", process, log_path, timeout=60)
        assert http_status(f"{base}/lab/tree/00_orientation/00_orientation.ipynb?token={token}") == 200
        assert http_status(f"{base}/api/contents/00_orientation?token={token}") == 200, \
            "JupyterLab should serve notebooks/ as its root"
    finally:
        stop(process)
