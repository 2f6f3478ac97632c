"""Test-suite wide settings: the marker-driven system requirements and the COURSE_STRICT switch.

A test marked ``slurm`` or ``browser`` needs system packages a laptop may lack. Without them it is
skipped with a message naming what to install; with COURSE_STRICT=1 (as CI sets) it fails instead,
so a CI machine that silently lost a package cannot pass.
"""

import os
import shutil
from typing import NoReturn

import pytest

SYSTEM_REQUIREMENTS = {
    "slurm": (["slurmctld", "slurmd", "munged", "sbatch", "shellcheck", "ruby"],
              "apt-get install slurm-wlm munge shellcheck ruby (as root)"),
    "browser": (["chromium"], "apt-get install chromium"),
    "portal": (["apache2"], "apt-get install apache2 (Debian's Apache httpd, as root)"),
    "hub": (["configurable-http-proxy", "runuser", "useradd"],
            "apt-get install nodejs npm && npm install -g configurable-http-proxy@5.1.0 (as root)"),
}
MISSING_PREFIX = "missing system dependency"


def strict_mode() -> bool:
    return os.environ.get("COURSE_STRICT") == "1"


def skip_or_fail(reason: str) -> NoReturn:
    """Skip for a student's laptop; fail under COURSE_STRICT=1 (CI). Every skip for a missing
    prerequisite goes through here (tests import it: ``from conftest import skip_or_fail``)."""
    message = f"{MISSING_PREFIX}: {reason}"
    if strict_mode():
        pytest.fail(message + " (COURSE_STRICT=1 turns this skip into a failure)", pytrace=False)
    pytest.skip(message)


def pytest_runtest_setup(item):
    for marker, (commands, install_hint) in SYSTEM_REQUIREMENTS.items():
        if item.get_closest_marker(marker) is None:
            continue
        missing = [command for command in commands if shutil.which(command) is None]
        if missing:
            skip_or_fail(f"{', '.join(missing)} not found; install with: {install_hint}")
