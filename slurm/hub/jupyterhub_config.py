"""JupyterHub for a class of the course: local Unix accounts (PAM), each student's JupyterLab as a Slurm
job (batchspawner's SlurmSpawner) or, where there is no Slurm, a local process, and nbgrader set up as
its documentation gives it: the course's groups, the Assignments tab for everyone and the Courses tab for
instructors, formgrader as a hub service that only the instructors' group reaches.

Started by `make hub-up` (slurm/hub/start.sh), as root, from the course's checkout. Every setting a site
changes is a COURSE_HUB_* value in slurm/site.sh or the environment (hub_settings.py lists them with their
defaults; docs/jupyterhub.md explains them). This file only wires them up.
"""

import os
import sys
from pathlib import Path

HUB_DIR = Path(__file__).resolve().parent          # slurm/hub/
COURSE_DIR = HUB_DIR.parents[1]                     # the checkout: notebooks, solutions, grading, .venv
sys.path.insert(0, str(HUB_DIR))

import batchspawner  # noqa: E402,F401  (registers the API a server in a job reports its port to)
from course_hub import (  # noqa: E402
    BATCH_SCRIPT,
    CourseAuthenticator,
    CourseLocalSpawner,
    CourseSlurmSpawner,
    warn_if_home_is_open,
)
from hub_settings import course_groups, course_id, grader_account, read_settings  # noqa: E402

from course_lib.real.cluster.slurm_jobs import slurm_environment, slurm_unavailable_reason  # noqa: E402

c = get_config()  # noqa: F821  (injected by traitlets when JupyterHub loads this file)

site = read_settings(COURSE_DIR)
COURSE = course_id(COURSE_DIR)                     # "distributed-training", from nbgrader_config.py
STUDENTS, INSTRUCTORS = course_groups(COURSE).values()
GRADER = grader_account(COURSE)
STATE = Path(site.dir)
# One Python environment for the hub, every student's server, formgrader and the course's kernel: the
# one this hub runs in (the checkout's .venv), so what a student runs is what the course was tested with.
# Servers start as `python -m`, never through an entry-point script, whose #! line would name the
# environment's first home if the course was copied elsewhere.
PYTHON = sys.executable
VENV_BIN = Path(PYTHON).parent
SINGLEUSER = [PYTHON, "-m", "jupyterhub.singleuser"]

# --- Where browsers and servers reach the hub; where it keeps its state ------------------------------
c.JupyterHub.ip = site.ip
c.JupyterHub.port = site.int_value("port")
if site.uses_tls:
    c.JupyterHub.ssl_cert, c.JupyterHub.ssl_key = site.ssl_cert, site.ssl_key
# Servers call the hub's API: on loopback when they run on this machine (the local spawner, a one-node
# Slurm); on every interface, announced as COURSE_HUB_CONNECT_IP, when compute nodes must reach it.
c.JupyterHub.hub_ip = "0.0.0.0" if site.connect_ip else "127.0.0.1"
c.JupyterHub.hub_port = site.int_value("api_port")
if site.connect_ip:
    c.JupyterHub.hub_connect_ip = site.connect_ip
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{site.proxy_api_port}"
c.ConfigurableHTTPProxy.pid_file = str(STATE / "proxy.pid")
c.JupyterHub.db_url = f"sqlite:///{STATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(STATE / "hub.pid")
# A hub restarted mid-class (an upgrade, `slurm/hub/stop.sh --keep-servers`) leaves students' servers
# running and finds them again; `make hub-down` stops them first, through the admin service below.
c.JupyterHub.cleanup_servers = False
c.JupyterHub.template_paths = [str(HUB_DIR / "templates")]

# --- Who may log in: members of the course's Unix groups, with their Unix password ----------------------
c.JupyterHub.authenticator_class = CourseAuthenticator
c.CourseAuthenticator.allowed_groups = {STUDENTS, INSTRUCTORS}
c.CourseAuthenticator.course_group_names = {STUDENTS, INSTRUCTORS}
c.CourseAuthenticator.manage_groups = True        # hub groups = the user's course groups, at each login

# --- What each group may do (nbgrader's roles) -----------------------------------------------------------
c.JupyterHub.load_roles = [
    # Instructors open formgrader (the service named after the course) and see it in their Courses tab.
    {"name": INSTRUCTORS, "groups": [INSTRUCTORS],
     "scopes": [f"access:services!service={COURSE}", "list:services", f"read:services!service={COURSE}"]},
    # Students see that the course exists (their Assignments tab), never formgrader itself.
    {"name": STUDENTS, "groups": [STUDENTS], "scopes": ["list:services", f"read:services!service={COURSE}"]},
    # A server's token may do what its owner may: nbgrader asks the hub for its user's course groups.
    {"name": "server", "scopes": ["inherit"]},
    # stop.sh stops every student's server before the hub (make hub-down) with this service's token.
    {"name": "course-hub-admin", "services": ["course-hub-admin"], "scopes": ["admin:servers", "list:users"]},
]

# The environment of every server the hub starts: the course's Python first, and the hub's nbgrader
# settings (jupyter/nbgrader_config.py reads these two).
NBGRADER_ENV = {
    "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
    "COURSE_HUB_EXCHANGE": site.exchange,
    "COURSE_HUB_COURSE_ID": COURSE,
}
SLURM_CONF = slurm_environment().get("SLURM_CONF")

# --- formgrader: a server run by the grader account in the course's folder, reached through the hub ----
c.JupyterHub.services = [
    {"name": COURSE,
     "url": f"http://127.0.0.1:{site.grader_port}",
     "command": SINGLEUSER,
     "user": GRADER,
     "cwd": str(COURSE_DIR),
     "oauth_no_confirm": True,
     "environment": {**NBGRADER_ENV, "JUPYTER_CONFIG_PATH": str(HUB_DIR / "jupyter"),
                     "JUPYTERHUB_DEFAULT_URL": "/formgrader"}},
    {"name": "course-hub-admin", "api_token": (STATE / "admin-token").read_text().strip()},
]

# --- Students' servers ------------------------------------------------------------------------------------
c.Spawner.cmd = SINGLEUSER
c.Spawner.default_url = "/lab"
c.Spawner.environment = {**NBGRADER_ENV, **({"SLURM_CONF": SLURM_CONF} if SLURM_CONF else {})}


def before_a_server_starts(spawner):
    """nbgrader's extensions by role, as its documentation's table gives them: in everyone's own server,
    the Assignments tab and neither formgrader nor Create Assignment (those are formgrader's server's);
    the Courses tab (a link to their formgrader) for instructors only. jupyter/ holds the three layers.
    And a word in the log if the user's home is open to other accounts."""
    groups = {group.name for group in spawner.user.groups}
    layers = ["users", ""] if INSTRUCTORS in groups else ["students", "users", ""]
    config_path = os.pathsep.join(str(HUB_DIR / "jupyter" / layer) for layer in layers)
    spawner.environment = {**spawner.environment, "JUPYTER_CONFIG_PATH": config_path}
    warn_if_home_is_open(spawner)


c.Spawner.pre_spawn_hook = before_a_server_starts
c.Spawner.poll_interval = site.int_value("poll_seconds")
c.Spawner.start_timeout = site.int_value("start_timeout")
c.Spawner.http_timeout = site.int_value("start_timeout")


def choose_spawner():
    """slurm when asked for or when a Slurm controller answers; the local spawner otherwise (auto)."""
    if site.spawner == "local":
        return CourseLocalSpawner, "local processes (COURSE_HUB_SPAWNER=local)"
    reason = slurm_unavailable_reason()
    if reason is None:
        return CourseSlurmSpawner, "Slurm jobs"
    if site.spawner == "slurm":
        raise SystemExit(f"COURSE_HUB_SPAWNER=slurm, but {reason}")
    return CourseLocalSpawner, f"local processes (COURSE_HUB_SPAWNER=auto and no Slurm here: {reason})"


spawner_class, spawner_words = choose_spawner()
c.JupyterHub.spawner_class = spawner_class
print(f"course hub: students' servers run as {spawner_words}", file=sys.stderr)

# A student's server as a Slurm job: the site's settings, submitted as the student (runuser, as root).
c.CourseSlurmSpawner.batch_script = BATCH_SCRIPT
c.CourseSlurmSpawner.req_partition = site.partition
c.CourseSlurmSpawner.req_account = site.account
c.CourseSlurmSpawner.req_runtime = site.time
c.CourseSlurmSpawner.req_memory = site.memory
c.CourseSlurmSpawner.req_nprocs = site.cpus
c.CourseSlurmSpawner.req_options = site.sbatch_options
# batchspawner's wrapper (it tells the hub the port) runs the jupyterhub-singleuser script's code itself.
c.CourseSlurmSpawner.batchspawner_singleuser_cmd = f"{PYTHON} -m batchspawner.singleuser"
c.CourseSlurmSpawner.cmd = [str(VENV_BIN / "jupyterhub-singleuser")]
if os.geteuid() == 0:
    c.CourseSlurmSpawner.exec_prefix = "runuser -u {username} --"
