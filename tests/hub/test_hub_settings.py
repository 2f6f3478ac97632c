"""The course hub's settings and wiring, without starting it: COURSE_HUB_* values from the environment
and slurm/site.sh (bad ones refused by name), the course's groups, jupyterhub_config.py as JupyterHub
loads it, nbgrader's tabs by role, and the sentence a student reads when their server's job ended.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from traitlets.config.loader import PyFileConfigLoader

REPO = Path(__file__).resolve().parents[2]
HUB = REPO / "slurm" / "hub"
sys.path.insert(0, str(HUB))
import course_hub  # noqa: E402
from hub_settings import HubSettings, course_id, read_settings, shell_assignments  # noqa: E402

CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("COURSE_HUB_")}


def course_with(tmp_path: Path, site: str = "", identifier: str = "distributed-training") -> Path:
    (tmp_path / "slurm").mkdir(parents=True, exist_ok=True)
    if site:
        (tmp_path / "slurm" / "site.sh").write_text(site)
    config = f"c = get_config()\nc.CourseDirectory.course_id = {identifier!r}\n"
    (tmp_path / "nbgrader_config.py").write_text(config)
    return tmp_path


def test_defaults_when_nothing_is_set(tmp_path):
    assert read_settings(course_with(tmp_path), CLEAN_ENV) == HubSettings()


def test_the_environment_then_site_sh_then_the_defaults(tmp_path):
    site = 'COURSE_HUB_PARTITION="${COURSE_HUB_PARTITION:-cpu}"\nCOURSE_HUB_MEMORY=16G\n'
    course = course_with(tmp_path, site)
    settings = read_settings(course, CLEAN_ENV)
    assert (settings.partition, settings.memory, settings.cpus) == ("cpu", "16G", "4")
    given = read_settings(course, {**CLEAN_ENV, "COURSE_HUB_PARTITION": "gpu", "COURSE_HUB_CPUS": "8"})
    assert (given.partition, given.cpus) == ("gpu", "8")


@pytest.mark.parametrize("name, value, says", [
    ("PORT", "eighty", "a port number"),
    ("API_PORT", "70000", "a port number"),
    ("TIME", "two hours", "a Slurm time limit"),
    ("MEMORY", "8 GB", "a Slurm memory size"),
    ("SPAWNER", "kubernetes", "one of auto, slurm, local"),
    ("CPUS", "0", "a whole number"),
    ("SSL_CERT", "/etc/ssl/hub.pem", "set along with the other"),
    ("GRADER_PORT", "8000", "different from"),
])
def test_a_bad_setting_is_refused_by_name(tmp_path, name, value, says):
    with pytest.raises(ValueError) as refused:
        read_settings(course_with(tmp_path), {**CLEAN_ENV, f"COURSE_HUB_{name}": value})
    message = str(refused.value)
    assert message.startswith(("COURSE_HUB_", f"COURSE_HUB_{name}")) and says in message, message
    assert "slurm/site.sh" in message


def test_course_id_names_the_groups_and_a_bad_one_is_refused(tmp_path):
    assert course_id(course_with(tmp_path)) == "distributed-training"
    with pytest.raises(ValueError, match="cannot name the hub's groups"):
        course_id(course_with(tmp_path, identifier="Distributed Training"))


def test_start_sh_reads_the_settings_as_bash_assignments(tmp_path, monkeypatch):
    for name in [k for k in os.environ if k.startswith("COURSE_HUB_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("COURSE_HUB_DIR", "/srv/a hub's state")  # read from the environment, as start.sh runs
    text = shell_assignments(course_with(tmp_path))
    show = f'{text}\nprintf "%s|%s|%s" "$HUB_STATE_DIR" "$GRADER" "$HUB_PORT"'
    shown = subprocess.run(["bash", "-c", show], capture_output=True, text=True, check=True).stdout
    assert shown == "/srv/a hub's state|grader-distributed-training|8000"


class FakeSpawner:
    """What RemembersHowItEnded builds on: a spawner whose server is running until poll says not."""

    def __init__(self):
        self.running, self.state = True, {"pid": 1}
        self.log = type("Log", (), {"warning": staticmethod(lambda *args: None)})()
        self.user = type("User", (), {"name": "ada"})()

    async def poll(self):
        return None if self.running else 1

    def get_state(self):
        return dict(self.state)

    def load_state(self, state):
        self.state = dict(state)

    def clear_state(self):
        self.state = {}


class Remembering(course_hub.RemembersHowItEnded, FakeSpawner):
    def _running_id(self):
        return "42" if self.state else ""

    async def _ending_of(self, running_id, status):
        return f"job {running_id} ended ({status})"


def test_the_ending_outlives_the_cleared_state_and_a_hub_restart():
    spawner = Remembering()
    assert asyncio.run(spawner.poll()) is None and spawner.last_end == ""
    spawner.running = False
    assert asyncio.run(spawner.poll()) == 1
    spawner.clear_state()                      # what the hub does with a stopped server
    assert spawner.last_end == "job 42 ended (1)"
    restarted = Remembering()
    restarted.load_state(spawner.get_state())  # the hub's database, read back by a restarted hub
    assert restarted.last_end == "job 42 ended (1)"


@pytest.mark.parametrize("state, words", [("CANCELLED by 0", "it was cancelled"),
                                          ("TIMEOUT", "time limit (2:00:00)"),
                                          ("OUT_OF_MEMORY", "ran out of memory"), ("BOOT_FAIL", "BOOT_FAIL")])
def test_a_slurm_ending_is_told_in_words_with_the_files_kept(monkeypatch, state, words):
    monkeypatch.setattr(course_hub, "job_state", lambda job, env, timeout: (state, "0:15", ""))
    spawner = course_hub.CourseSlurmSpawner.__new__(course_hub.CourseSlurmSpawner)
    monkeypatch.setattr(course_hub.CourseSlurmSpawner, "req_runtime", "2:00:00", raising=False)
    sentence = asyncio.run(spawner._ending_of("812", 1))
    assert sentence.startswith("Your server ran as Slurm job 812") and words in sentence, sentence
    assert course_hub.FILES_KEPT in sentence


def load_hub_config(tmp_path, **settings):
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    (state / "admin-token").write_text("t" * 64)
    env = {"COURSE_HUB_DIR": str(state), "COURSE_HUB_SPAWNER": "local", **settings}
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        return PyFileConfigLoader("jupyterhub_config.py", path=str(HUB)).load_config()
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_the_config_gives_formgrader_to_instructors_only(tmp_path):
    config = load_hub_config(tmp_path)
    roles = {role["name"]: role for role in config.JupyterHub.load_roles}
    assert "access:services!service=distributed-training" in roles["formgrade-distributed-training"]["scopes"]
    assert not any(scope.startswith("access:") for scope in roles["nbgrader-distributed-training"]["scopes"])
    service = next(s for s in config.JupyterHub.services if s["name"] == "distributed-training")
    assert service["user"] == "grader-distributed-training" and service["cwd"] == str(REPO)
    assert service["url"].startswith("http://127.0.0.1:")
    assert config.JupyterHub.spawner_class is course_hub.CourseLocalSpawner
    assert config.CourseAuthenticator.allowed_groups == {"nbgrader-distributed-training",
                                                         "formgrade-distributed-training"}
    assert config.JupyterHub.cleanup_servers is False


@pytest.mark.parametrize("groups, courses_tab", [(["nbgrader-distributed-training"], False),
                                                 (["formgrade-distributed-training"], True)])
def test_nbgrader_tabs_by_role(tmp_path, monkeypatch, groups, courses_tab):
    """JupyterLab's own merge of the layers the hook picks: formgrader and Create Assignment off for every
    user, the Courses tab on for instructors only (nbgrader's documented table)."""
    from jupyter_core.paths import jupyter_path
    from jupyterlab_server.config import get_page_config

    config = load_hub_config(tmp_path)
    spawner = type("Spawner", (), {"environment": {}})()
    spawner.user = type("User", (), {"name": "no-such-account",
                                     "groups": [type("Group", (), {"name": g})() for g in groups]})()
    config.Spawner.pre_spawn_hook(spawner)
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", spawner.environment["JUPYTER_CONFIG_PATH"])
    disabled = set(get_page_config(jupyter_path("labextensions"), logger=None)["disabledExtensions"])
    assert {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment"} <= disabled
    assert ("@jupyter/nbgrader:course-list" not in disabled) == courses_tab


def test_auto_takes_slurm_when_a_controller_answers_and_local_processes_otherwise(tmp_path, monkeypatch):
    from course_lib.real.cluster import slurm_jobs

    monkeypatch.setattr(slurm_jobs, "slurm_unavailable_reason", lambda env=None: None)
    assert load_hub_config(tmp_path, COURSE_HUB_SPAWNER="auto").JupyterHub.spawner_class \
        is course_hub.CourseSlurmSpawner
    monkeypatch.setattr(slurm_jobs, "slurm_unavailable_reason", lambda env=None: "no controller answers")
    assert load_hub_config(tmp_path, COURSE_HUB_SPAWNER="auto").JupyterHub.spawner_class \
        is course_hub.CourseLocalSpawner
    with pytest.raises(SystemExit, match="COURSE_HUB_SPAWNER=slurm, but no controller answers"):
        load_hub_config(tmp_path, COURSE_HUB_SPAWNER="slurm")


def test_a_home_open_to_others_is_named_in_the_hub_log(tmp_path, monkeypatch):
    warnings = []
    spawner = type("Spawner", (), {})()
    spawner.user = type("User", (), {"name": "ada"})()
    warn = staticmethod(lambda text, *args: warnings.append(text % args))
    spawner.log = type("Log", (), {"warning": warn})()
    home = tmp_path / "ada"
    home.mkdir(mode=0o755)
    monkeypatch.setattr(course_hub.pwd, "getpwnam", lambda name: type("Entry", (), {"pw_dir": str(home)})())
    course_hub.warn_if_home_is_open(spawner)
    home.chmod(0o700)
    course_hub.warn_if_home_is_open(spawner)
    assert warnings == [f"home of ada ({home}) is mode 755: other accounts may read the work in it; "
                        "chmod 700 it"]
