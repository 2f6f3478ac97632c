"""The README's first command, `make lab`, ends with JupyterLab serving the course on a headless machine."""

from pathlib import Path

import pytest

from tests.support.jupyter_server import http_status, make_lab

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_make_lab_serves_the_course_headless(tmp_path):
    with make_lab(ROOT, tmp_path) as (base, token):
        assert http_status(f"{base}/lab/tree/00_orientation/00_orientation.ipynb?token={token}") == 200
        assert http_status(f"{base}/api/contents/00_orientation?token={token}") == 200, \
            "JupyterLab should serve notebooks/ as its root"
