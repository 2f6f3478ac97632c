"""The course's own pieces of JupyterHub: who may log in (PAM, the course's Unix groups mirrored as hub
groups) and the two spawners (a Slurm job per student, or a local process) that remember how a
student's last server ended, so the hub can tell the student why it is gone and that their files are kept.
"""

from __future__ import annotations

import asyncio
import grp
import os
import pwd

from batchspawner import SlurmSpawner
from jupyterhub.auth import PAMAuthenticator
from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Set, Unicode

from course_lib.real.cluster.slurm_jobs import job_state, slurm_environment

# What each final Slurm state means for a student, said the way they need it.
SLURM_ENDINGS = {
    "CANCELLED": "it was cancelled (by an administrator or by Slurm, e.g. when a node is drained)",
    "TIMEOUT": "it reached its time limit",
    "OUT_OF_MEMORY": "it ran out of memory (a notebook used more than the job's memory)",
    "NODE_FAIL": "its compute node failed",
    "PREEMPTED": "it was preempted by a job of higher priority",
    "FAILED": "it failed (its log is in your home folder)",
    "COMPLETED": "it ended",
}
FILES_KEPT = ("Your files are kept where you saved them (in your home folder): start a new server and go on "
              "from your last save.")


def warn_if_home_is_open(spawner) -> None:
    """Other students could read a home that others may enter (Debian's useradd makes them 0755): the
    hub still starts the server, and says so in its log for the admin (docs/jupyterhub.md)."""
    try:
        home = pwd.getpwnam(spawner.user.name).pw_dir
        mode = os.stat(home).st_mode
    except (KeyError, OSError):
        return
    if mode & 0o077:
        spawner.log.warning("home of %s (%s) is mode %o: other accounts may read the work in it; "
                            "chmod 700 it", spawner.user.name, home, mode & 0o777)


def unix_groups(username: str) -> set[str]:
    """Every Unix group the account belongs to, its primary group included."""
    entry = pwd.getpwnam(username)
    return {grp.getgrgid(gid).gr_name for gid in os.getgrouplist(username, entry.pw_gid)}


class CourseAuthenticator(PAMAuthenticator):
    """Local Unix accounts through PAM. The course's groups are Unix groups (the admin enrols with
    `usermod -aG`); at every login the hub sets the user's hub groups to their course groups, which is
    where nbgrader looks (nbgrader-<course>: a student; formgrade-<course>: an instructor)."""

    course_group_names = Set(Unicode(), help="the Unix groups mirrored into the hub").tag(config=True)

    async def authenticate(self, handler, data):
        authenticated = await super().authenticate(handler, data)
        if authenticated is None:
            return None
        name = authenticated["name"] if isinstance(authenticated, dict) else authenticated
        groups = sorted(unix_groups(name) & self.course_group_names)
        return {"name": name, "groups": groups}


class RemembersHowItEnded:
    """A spawner that, when it finds its server gone, keeps a sentence saying why for the hub's pages
    (templates/home.html, templates/not_running.html). It survives the hub's restarts (in the state)."""

    last_end = ""

    def _running_id(self) -> str:
        """The job id or process id of the running server ("" when there is none)."""
        raise NotImplementedError

    async def _ending_of(self, running_id: str, status) -> str:
        """The sentence the student reads about the server ``running_id``, now gone."""
        raise NotImplementedError

    async def start(self):
        self.last_end = ""
        return await super().start()

    async def poll(self):
        was_running = self._running_id()
        status = await super().poll()
        if status is not None and was_running:
            self.last_end = await self._ending_of(was_running, status)
            self.log.warning("server of %s is gone: %s", self.user.name, self.last_end)
        return status

    def get_state(self):
        state = super().get_state()
        if self.last_end:
            state["course_last_end"] = self.last_end
        return state

    def load_state(self, state):
        super().load_state(state)
        self.last_end = state.get("course_last_end", "")

    def clear_state(self):
        # The hub clears a stopped server's state; the sentence must outlive it until the next start.
        kept = self.last_end
        super().clear_state()
        self.last_end = kept


class CourseSlurmSpawner(RemembersHowItEnded, SlurmSpawner):
    """A student's server as a Slurm job (batchspawner), submitted as the student."""

    def _running_id(self) -> str:
        return self.job_id

    async def _ending_of(self, job_id: str, status) -> str:
        state, exit_code, _ = await asyncio.to_thread(job_state, job_id, slurm_environment(), 30)
        state = state.split()[0] if state else "UNKNOWN"
        why = SLURM_ENDINGS.get(state, f"it ended ({state}, exit code {exit_code})")
        if state == "TIMEOUT":
            why += f" ({self.req_runtime})"
        return f"Your server ran as Slurm job {job_id}, which has ended: {why}. {FILES_KEPT}"


class CourseLocalSpawner(RemembersHowItEnded, LocalProcessSpawner):
    """A student's server as a process on the hub's machine (where there is no Slurm)."""

    def _running_id(self) -> str:
        return str(self.pid or "")

    async def _ending_of(self, pid: str, status) -> str:
        return f"Your server (process {pid}) has stopped (exit status {status}). {FILES_KEPT}"


# The job that runs a student's server: the site's settings, the course's environment and the hub's
# address come from jupyterhub_config.py; {{cmd}} is batchspawner's jupyterhub-singleuser command line.
BATCH_SCRIPT = """#!/bin/bash
#SBATCH --job-name=course-hub-{{username}}
#SBATCH --output={{homedir}}/.course-hub-server-%j.log
#SBATCH --chdir={{homedir}}
#SBATCH --export={{keepvars}}
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task={{nprocs}}
#SBATCH --mem={{memory}}
#SBATCH --time={{runtime}}
{% if partition %}#SBATCH --partition={{partition}}
{% endif %}{% if account %}#SBATCH --account={{account}}
{% endif %}{% if options %}#SBATCH {{options}}
{% endif %}
set -euo pipefail
echo "course hub: server of {{username}} in job ${SLURM_JOB_ID} on $(hostname)"
# In the batch step itself (no srun): the server, its kernels and their ranks get all the job's cores.
exec {{cmd}}
"""
