"""Fixtures of the Slurm tests: one local single-node Slurm for the whole session.

It is started once (slurm/local/start.sh) and stopped at the end of the session if this session
started it; a cluster that was already up (a student's own) is reused and left running.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import skip_or_fail
from tests.slurm.cluster import LocalSlurm, missing_requirements


@pytest.fixture(scope="session")
def local_slurm():
    reason = missing_requirements()
    if reason:
        skip_or_fail(reason)
    # The same folder start.sh uses by default, so a cluster a student already runs is found and reused.
    default_dir = os.path.join(os.environ.get("TMPDIR", "/tmp"), "course-slurm")
    state_dir = os.environ.get("COURSE_SLURM_DIR") or default_dir
    cluster = LocalSlurm(Path(state_dir))
    cluster.start()
    try:
        yield cluster
    finally:
        if cluster.started_here:
            cluster.stop()


@pytest.fixture(scope="session")
def submit_dir(tmp_path_factory):
    """Where the tests run sbatch: job output and runs/ land here, never in the checkout."""
    return tmp_path_factory.mktemp("sbatch")
