"""The hub where there is no Slurm: a student's server is a process on the hub's machine, running as the
student with the students' nbgrader layers; when it dies, the hub says so and the next start works."""

from __future__ import annotations

import os
import signal

import pytest

from tests.hub.hub_driver import logged_in, process_uid_and_environ

pytestmark = [pytest.mark.slow, pytest.mark.hub, pytest.mark.timeout(300)]


def test_a_students_server_as_a_local_process(local_site_hub, class_accounts):
    hub, ada = local_site_hub, class_accounts.students[0]
    assert "servers run as local processes" in hub.up()
    session = logged_in(hub, ada, class_accounts.passwords[ada])
    session.get(f"{hub.url}/hub/spawn", timeout=60)

    def server():
        return hub.api(f"/users/{ada}")["servers"].get("", {})

    def running_pid():
        return server().get("ready") and server()["state"]["pid"]

    pid = hub.wait_for(running_pid, "the student's server", 120)
    uid, environ = process_uid_and_environ(pid)
    assert uid == class_accounts.uid(ada)
    assert environ["JUPYTER_CONFIG_PATH"].split(os.pathsep)[0].endswith("jupyter/students")
    lab = session.get(f"{hub.url}/user/{ada}/lab", timeout=60)   # through the hub's OAuth, as a browser
    assert lab.status_code == 200 and lab.url.startswith(f"{hub.url}/user/{ada}/lab"), lab.url

    os.kill(pid, signal.SIGKILL)
    hub.wait_for(lambda: not server(), "the hub noticing the dead server", 60)
    home = session.get(f"{hub.url}/hub/home", timeout=60).text
    assert f"Your server (process {pid}) has stopped" in home and "files are kept" in home, home[-2000:]

    session.get(f"{hub.url}/hub/spawn", timeout=60)
    again = hub.wait_for(running_pid, "a new server", 120)
    assert again != pid
    hub.down()
    assert not os.path.exists(f"/proc/{again}"), "make hub-down left the student's server running"
