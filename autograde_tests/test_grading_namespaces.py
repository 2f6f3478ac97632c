"""Fast tests of each student's namespaces (bubblewrap), and of what the grader takes from a kernel.

As root, a student's grading processes run in a PID namespace that dies whole, a network with loopback
only and a private /tmp, /var/tmp and /dev/shm; without bubblewrap (or where it cannot make them) root
grading is refused, saying what to install. The hostile class (test_grading_robustness.py) holds the same
through nbgrader.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import time

import pytest

from conftest import skip_or_fail
from course_lib.grading.autograder import preflight
from course_lib.grading.sandbox import execute, namespaces
from course_lib.grading.sandbox.policy import running_as_root
from course_lib.real.plumbing.processes import Sessions


def test_as_root_without_bubblewrap_grading_is_refused_saying_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(namespaces, "running_as_root", lambda: False)
    assert namespaces.isolated(["true"]) == ["true"]   # without root: nothing to isolate with
    monkeypatch.setattr(namespaces, "running_as_root", lambda: True)
    monkeypatch.setattr(namespaces.shutil, "which", lambda name: None)
    with pytest.raises(namespaces.IsolationUnavailable, match="apt-get install bubblewrap"):
        namespaces.isolated(["true"])
    monkeypatch.setattr(preflight, "running_as_root", lambda: True)
    with pytest.raises(preflight.GradingRefused, match="Nobody was graded"):
        preflight.check_sandbox_reach(None, tmp_path, 61000)


def test_where_bubblewrap_cannot_make_the_namespaces_grading_is_refused(monkeypatch):
    monkeypatch.setattr(namespaces, "running_as_root", lambda: True)
    monkeypatch.setattr(namespaces, "bwrap_path", lambda: "/bin/false")
    with pytest.raises(namespaces.IsolationUnavailable, match="cannot make them here.*CAP_SYS_ADMIN"):
        namespaces.check_isolation()


PROBE = """import os, socket, sys
print("pid", os.getpid())
print("interfaces", sorted(line.split(":")[0].strip() for line in open("/proc/net/dev").readlines()[2:]))
print("beside", sorted(os.listdir(os.path.dirname(sys.argv[1]))))
print("kept", sorted(os.listdir(sys.argv[1])))
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=2).close()
    print("reached")
except OSError:
    print("refused")
if os.fork() == 0:          # a detached daemon: it must die with the namespace
    import ctypes, time
    os.setsid()
    ctypes.CDLL(None).prctl(15, b"ns-probe-daemon", 0, 0, 0)
    os.closerange(0, 4096)
    time.sleep(30)
    os._exit(0)
"""


def test_a_students_processes_see_their_own_pids_loopback_and_tmp_and_die_whole(tmp_path):
    if not running_as_root() or not shutil.which("bwrap"):
        skip_or_fail("a student's namespaces need root and bubblewrap (apt-get install bubblewrap)")
    namespaces.check_isolation()
    kept = tmp_path / "course-x"
    kept.mkdir()
    (kept / "mine").write_text("x")
    (tmp_path / "other-student").mkdir()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    ok, output = Sessions().run(namespaces.isolated([sys.executable, "-c", PROBE, str(kept), str(port)],
                                                    keep=[kept]), tmp_path, None, 60)
    listener.close()
    assert ok, output
    lines = dict(line.split(" ", 1) for line in output.splitlines() if " " in line)
    assert int(lines["pid"]) < 10, "a PID namespace of its own"
    assert lines["interfaces"] == "['lo']"
    assert lines["beside"] == "['course-x']", "the rest of /tmp is not there"
    assert lines["kept"] == "['mine']"
    assert "refused" in output and "reached" not in output
    time.sleep(0.5)
    assert not _named("ns-probe-daemon"), "the detached daemon died with the namespace"


def _named(name: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if open(f"/proc/{pid}/comm").read().strip() == name:
                found.append(pid)
        except OSError:
            continue
    return found


def test_kernel_output_is_made_writable_and_the_graders_error_names_are_its_own():
    output = execute.safe_text({"name": "stdout", "text": "a\ud800b", "data": {"text/\udc00": ["\ud800"]}})
    assert output == {"name": "stdout", "text": "a?b", "data": {"text/?": ["?"]}}
    raised = execute._disown({"ename": execute.MACHINE_BUSY, "evalue": "forged"})
    assert raised["ename"] == execute.MACHINE_BUSY + execute.STUDENT_RAISED
    assert execute._disown({"ename": "ValueError"}) == {"ename": "ValueError"}
