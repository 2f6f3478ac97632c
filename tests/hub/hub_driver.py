"""Driving the course hub (slurm/hub) from tests: its Unix accounts, `make hub-up` / stop.sh with the
settings a test gives it, the hub's REST API as its admin service, and running code as another account.

Everything runs under a timeout, and whatever a test creates (accounts, groups, the hub's processes)
is removed again, so that no run leaves the machine different.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import secrets
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "slurm" / "hub"))
from hub_settings import course_groups, course_id, grader_account  # noqa: E402

COURSE_ID = course_id(Path(__file__).resolve().parents[2])
GROUPS = course_groups(COURSE_ID)
GRADER = grader_account(COURSE_ID)


def run(*command: str | os.PathLike, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(part) for part in command], capture_output=True, text=True, timeout=timeout,
                          **kwargs)


def exists(kind: str, name: str) -> bool:
    try:
        (pwd.getpwnam if kind == "user" else grp.getgrnam)(name)
        return True
    except KeyError:
        return False


@dataclass
class ClassAccounts:
    """Local Unix accounts for a class: students and instructors with random passwords and private homes,
    in the course's groups. The course's groups and grader account are the hub's (start.sh makes them);
    whatever did not exist before is removed by ``remove``."""

    students: list[str]
    instructors: list[str]
    passwords: dict[str, str] = field(default_factory=dict)
    existed_before: set[str] = field(default_factory=set)

    def create(self) -> ClassAccounts:
        self.existed_before = {f"group:{g}" for g in GROUPS.values() if exists("group", g)}
        self.existed_before |= {f"user:{GRADER}"} if exists("user", GRADER) else set()
        for group in GROUPS.values():
            if not exists("group", group):
                run("groupadd", group, check=True)
        for name in self.students + self.instructors:
            if exists("user", name):  # left by a run that was killed: these names are the tests' own
                run("userdel", "--remove", "--force", name)
            run("useradd", "--create-home", "--key", "HOME_MODE=0700", "--shell", "/bin/bash", name,
                check=True)
            group = GROUPS["students"] if name in self.students else GROUPS["instructors"]
            run("usermod", "--append", "--groups", group, name, check=True)
            self.passwords[name] = secrets.token_urlsafe(12)
            run("chpasswd", input=f"{name}:{self.passwords[name]}\n", check=True)
        return self

    def home(self, name: str) -> Path:
        return Path(pwd.getpwnam(name).pw_dir)

    def uid(self, name: str) -> int:
        return pwd.getpwnam(name).pw_uid

    def remove(self) -> None:
        for name in self.students + self.instructors:
            run("userdel", "--remove", "--force", name)
        if f"user:{GRADER}" not in self.existed_before and exists("user", GRADER):
            run("userdel", "--remove", "--force", GRADER)
        for group in GROUPS.values():
            if f"group:{group}" not in self.existed_before and exists("group", group):
                run("groupdel", group)


def as_account(name: str, python: Path, code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -c code`` as the account ``name`` (its uid, gid and groups), from its home."""
    entry = pwd.getpwnam(name)
    groups = os.getgrouplist(name, entry.pw_gid)
    env = {"HOME": entry.pw_dir, "PATH": "/usr/bin:/bin"}
    return subprocess.run([str(python), "-c", code], user=entry.pw_uid, group=entry.pw_gid,
                          extra_groups=groups, cwd=entry.pw_dir, env=env, capture_output=True, text=True,
                          timeout=timeout)


@dataclass
class CourseHub:
    """The hub of a course installed at ``course``, with its state, exchange and ports given by ``env``."""

    course: Path
    env: dict[str, str]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.env['COURSE_HUB_PORT']}"

    @property
    def state(self) -> Path:
        return Path(self.env["COURSE_HUB_DIR"])

    @property
    def exchange(self) -> Path:
        return Path(self.env["COURSE_HUB_EXCHANGE"]) / COURSE_ID

    def _command(self, *command: str, timeout: float) -> str:
        result = run(*command, cwd=self.course, env=self.env, timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}):\n"
                               f"{result.stdout}{result.stderr}\n--- hub.log (tail)\n{self.log_tail()}")
        return result.stdout

    def up(self) -> str:
        return self._command("make", "--no-print-directory", "hub-up", timeout=240)

    def down(self, *options: str) -> str:
        return self._command("slurm/hub/stop.sh", *options, timeout=240)

    def log_tail(self, lines: int = 40) -> str:
        log = self.state / "hub.log"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else ""

    def api(self, path: str, method: str = "GET"):
        """The hub's REST API as its course-hub-admin service (the token start.sh made)."""
        token = (self.state / "admin-token").read_text().strip()
        request = urllib.request.Request(f"{self.url}/hub/api{path}", method=method,
                                         headers={"Authorization": f"token {token}"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            body = answer.read()
            return json.loads(body) if body else None

    def server_job(self, user: str) -> str | None:
        """The Slurm job id the hub holds for the user's running server, or None."""
        model = self.api(f"/users/{user}")
        server = model.get("servers", {}).get("", {})
        return (server.get("state") or {}).get("job_id") if server.get("ready") else None

    def wait_for(self, condition, what: str, timeout: float = 120, every: float = 0.5):
        deadline = time.monotonic() + timeout
        while not (value := condition()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not within {timeout} s\n--- hub.log (tail)\n{self.log_tail()}")
            time.sleep(every)
        return value


def logged_in(hub: CourseHub, user: str, password: str):
    """A requests session logged in to the hub as ``user`` (its login form, with PAM behind it)."""
    import requests

    session = requests.Session()
    session.get(f"{hub.url}/hub/login", timeout=60)
    form = {"username": user, "password": password, "_xsrf": session.cookies.get("_xsrf")}
    answer = session.post(f"{hub.url}/hub/login", data=form, allow_redirects=False, timeout=60)
    assert answer.status_code == 302, f"{user} could not log in: {answer.status_code}\n{hub.log_tail()}"
    return session


def process_uid_and_environ(pid: int) -> tuple[int, dict[str, str]]:
    proc = Path("/proc") / str(pid)
    pairs = (proc / "environ").read_bytes().decode(errors="replace").split("\0")
    return proc.stat().st_uid, dict(pair.split("=", 1) for pair in pairs if "=" in pair)
