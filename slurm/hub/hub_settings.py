"""The course hub's site settings: every COURSE_HUB_* value, its default and what it means, read from the
environment or slurm/site.sh (the one file a site edits for every Slurm setting of the course).

jupyterhub_config.py and start.sh both read them here, so the hub, its proxy and its state folder agree.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields
from pathlib import Path

from traitlets.config.loader import PyFileConfigLoader

from course_lib.real.cluster.slurm_jobs import shell_variables

SPAWNERS = ("auto", "slurm", "local")
# Slurm's --time formats: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
SLURM_TIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")
SLURM_MEMORY = re.compile(r"^\d+[KMGT]?$")


@dataclass(frozen=True)
class HubSettings:
    """What a site may set, as COURSE_HUB_<NAME> (upper case) in slurm/site.sh or the environment."""

    dir: str = "/srv/course-hub"  # the hub's state: database, cookie secret, tokens, log
    exchange: str = "/srv/nbgrader/exchange"  # nbgrader's exchange (the documented place)
    ip: str = "127.0.0.1"  # where the hub listens for browsers (0.0.0.0: every interface)
    port: str = "8000"  # ... and on which port
    ssl_cert: str = ""  # TLS certificate and key for that port (both, or neither)
    ssl_key: str = ""
    api_port: str = "8081"  # the hub's own API, which every student's server calls
    proxy_api_port: str = "8001"  # configurable-http-proxy's API (loopback only)
    grader_port: str = "9999"  # formgrader's server (loopback only, reached through the hub)
    connect_ip: str = ""  # the hub's address as compute nodes reach it ("": this machine)
    spawner: str = "auto"  # slurm, local, or auto: slurm when a controller answers
    partition: str = ""  # a student's server job: its partition ("": the default one)
    account: str = ""  # ... the account it is charged to ("": the user's default)
    time: str = "2:00:00"  # ... its time limit (sbatch --time)
    memory: str = "8G"  # ... its memory (sbatch --mem)
    cpus: str = "4"  # ... its cores (the notebooks start up to 4 ranks)
    sbatch_options: str = ""  # ... any other sbatch options, e.g. "--gres=gpu:1 --qos=course"
    poll_seconds: str = "30"  # how often the hub checks that each server is still up
    start_timeout: str = "300"  # seconds a server may take to start, queue wait included

    @property
    def uses_tls(self) -> bool:
        return bool(self.ssl_cert)

    def int_value(self, name: str) -> int:
        return int(getattr(self, name))


def env_name(field_name: str) -> str:
    return f"COURSE_HUB_{field_name.upper()}"


def _check(settings: HubSettings) -> None:
    """Refuse a value the hub or sbatch would trip over later, naming the setting and what it takes."""
    def refuse(name: str, wants: str) -> None:
        raise ValueError(f"{env_name(name)}={getattr(settings, name)!r} is not {wants}; set it in "
                         "slurm/site.sh or the environment (docs/jupyterhub.md lists every setting)")

    for name in ("port", "api_port", "proxy_api_port", "grader_port"):
        value = getattr(settings, name)
        if not value.isdigit() or not 0 < int(value) < 65536:
            refuse(name, "a port number (1-65535)")
    for name in ("poll_seconds", "start_timeout", "cpus"):
        if not getattr(settings, name).isdigit() or int(getattr(settings, name)) < 1:
            refuse(name, "a whole number of at least 1")
    if settings.spawner not in SPAWNERS:
        refuse("spawner", f"one of {', '.join(SPAWNERS)}")
    if not SLURM_TIME.match(settings.time):
        refuse("time", "a Slurm time limit such as 2:00:00, 90 or 1-00:00:00")
    if not SLURM_MEMORY.match(settings.memory):
        refuse("memory", "a Slurm memory size such as 8G or 4096M")
    if bool(settings.ssl_cert) != bool(settings.ssl_key):
        refuse("ssl_key" if settings.ssl_cert else "ssl_cert", "set along with the other of SSL_CERT/SSL_KEY")
    if len({settings.port, settings.api_port, settings.proxy_api_port, settings.grader_port}) < 4:
        refuse("port", "different from API_PORT, PROXY_API_PORT and GRADER_PORT")


def read_settings(course_dir: Path, env: dict | None = None) -> HubSettings:
    """The settings in force: the environment's COURSE_HUB_* values, then slurm/site.sh's, then the
    defaults above (site.sh is sourced, so its `${COURSE_HUB_X:-value}` lets the environment win)."""
    env = dict(os.environ if env is None else env)
    names = [env_name(f.name) for f in fields(HubSettings)]
    site_file = Path(course_dir) / "slurm" / "site.sh"
    values = shell_variables(site_file, names, env) if site_file.is_file() else {}
    given = {}
    for f in fields(HubSettings):
        value = (values.get(env_name(f.name)) or env.get(env_name(f.name)) or "").strip()
        if value:
            given[f.name] = value
    settings = HubSettings(**given)
    _check(settings)
    return settings


def course_id(course_dir: Path) -> str:
    """The course's id in its nbgrader_config.py: the exchange's folder, the groups' and service's name."""
    config = PyFileConfigLoader("nbgrader_config.py", path=str(course_dir)).load_config()
    identifier = config.CourseDirectory.get("course_id", "")
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,20}", identifier or ""):
        raise ValueError(f"nbgrader_config.py's course_id {identifier!r} cannot name the hub's groups: use "
                         "lower-case letters, digits and '-', at most 21 characters (Unix group names)")
    return identifier


def course_groups(identifier: str) -> dict[str, str]:
    """The course's two groups, as nbgrader names them: Unix groups and JupyterHub groups alike."""
    return {"students": f"nbgrader-{identifier}", "instructors": f"formgrade-{identifier}"}


def grader_account(identifier: str) -> str:
    """The account formgrader runs as (nbgrader's documented grader-<course>)."""
    return f"grader-{identifier}"


def shell_assignments(course_dir: Path) -> str:
    """The settings start.sh and stop.sh need, as bash assignments (`eval` them)."""
    import shlex

    settings, identifier = read_settings(course_dir), course_id(course_dir)
    groups = course_groups(identifier)
    values = {"HUB_STATE_DIR": settings.dir, "HUB_EXCHANGE": settings.exchange, "HUB_IP": settings.ip,
              "HUB_PORT": settings.port, "HUB_SCHEME": "https" if settings.uses_tls else "http",
              "COURSE_ID": identifier, "STUDENTS_GROUP": groups["students"],
              "INSTRUCTORS_GROUP": groups["instructors"], "GRADER": grader_account(identifier)}
    return "\n".join(f"{name}={shlex.quote(value)}" for name, value in values.items())


if __name__ == "__main__":
    import sys

    try:
        print(shell_assignments(Path(sys.argv[1])))
    except ValueError as error:
        sys.exit(f"error: {error}")
