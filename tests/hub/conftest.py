"""Fixtures of the hub tests: the session's local Slurm (the one tests/slurm starts, reused), a class's
accounts, and the course installed where every account can read it with its hub up."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pytest

from conftest import skip_or_fail
from tests.hub.hub_driver import ClassAccounts, CourseHub
from tests.slurm.conftest import local_slurm  # noqa: F401  (the session's local Slurm)
from tests.support.jupyter_server import free_port
from tests.support.site_install import copy_checkout, shared_folder

STUDENTS, INSTRUCTORS = ["chub-ada", "chub-bob"], ["chub-ines"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "hub"


@pytest.fixture
def class_accounts():
    if os.geteuid() != 0:
        skip_or_fail("the hub test creates Unix accounts and runs the hub as root (as CI does)")
    accounts = ClassAccounts(STUDENTS, INSTRUCTORS).create()
    try:
        yield accounts
    finally:
        accounts.remove()


@contextlib.contextmanager
def hub_on_a_site_copy(accounts: ClassAccounts, **settings: str):
    """The course copied where every account can read it (as /opt/distributed-course), with its hub's
    settings: free ports, state and exchange beside the copy, a hub that checks each server every 2 s,
    and ``settings``. The hub is not started (the test does that); it is always stopped."""
    area = shared_folder("course-hub-")
    course = copy_checkout(area, for_everyone=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    ports = {name: str(free_port()) for name in ("PORT", "API_PORT", "PROXY_API_PORT", "GRADER_PORT")}
    env.update({f"COURSE_HUB_{name}": port for name, port in ports.items()})
    env.update(COURSE_HUB_DIR=str(area / "state"), COURSE_HUB_EXCHANGE=str(area / "exchange"),
               COURSE_HUB_POLL_SECONDS="2", COURSE_HUB_START_TIMEOUT="120", **settings)
    hub = CourseHub(course, env)
    try:
        yield hub
    finally:
        if (hub.state / "hub.pid").exists():
            hub.down()
        keep_logs(hub, accounts)
        shutil.rmtree(area, ignore_errors=True)


@pytest.fixture
def site_hub(local_slurm, class_accounts):  # noqa: F811
    """The hub with students' servers as small jobs on the local Slurm."""
    slurm = {name: local_slurm.env[name] for name in ("SLURM_CONF", "COURSE_SLURM_DIR")}
    with hub_on_a_site_copy(class_accounts, **slurm, COURSE_HUB_SPAWNER="slurm", COURSE_HUB_CPUS="1",
                            COURSE_HUB_MEMORY="2G", COURSE_HUB_TIME="30") as hub:
        yield hub


@pytest.fixture
def local_site_hub(class_accounts):
    """The hub with students' servers as processes on this machine (where there is no Slurm)."""
    with hub_on_a_site_copy(class_accounts, COURSE_HUB_SPAWNER="local") as hub:
        yield hub


def keep_logs(hub: CourseHub, accounts: ClassAccounts) -> None:
    """The hub's log and the students' server-job logs, into test-artifacts/hub/ for a human to read."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    logs = [hub.state / "hub.log", *(log for name in accounts.students + accounts.instructors
                                     for log in accounts.home(name).glob(".course-hub-server-*.log"))]
    for log in logs:
        if log.is_file():
            shutil.copy(log, ARTIFACTS / f"{log.parent.name}-{log.name.lstrip('.')}")
