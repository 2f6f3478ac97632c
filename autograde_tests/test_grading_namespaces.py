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
from pathlib import Path

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


# Issue 53: a child forked from a process the grader started in a student's namespaces (as the judge's are)
# and caged by the policy, as student code would be: what it can reach of the host and of its own memory.
CAGED_CHILD = r'''import ctypes, fcntl, os, socket, sys
from course_lib.grading.sandbox.policy import SandboxPolicy
pid = os.fork()
if pid:
    sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
SandboxPolicy.from_json(sys.argv[1]).enter()
print("run holds", sorted(os.listdir("/run")))
for kind, path in (("host socket", sys.argv[2]), ("socket elsewhere", sys.argv[7]),
                   ("socket in a kept folder", sys.argv[8])):
    try:
        socket.socket(socket.AF_UNIX).connect(path)
        print(kind, "reached")
    except OSError as error:
        print(kind, "refused", type(error).__name__)
try:
    with open(sys.argv[3]) as lease:
        fcntl.flock(lease, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("lease locked")
except OSError as error:
    print("lease refused", type(error).__name__)
for lock_dir in ("/run/lock", "/var/lock"):
    try:
        open(os.path.join(lock_dir, sys.argv[4]), "w").close()
        print("wrote", lock_dir)
    except OSError as error:
        print("could not write", lock_dir, type(error).__name__)
fields = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
env_start, env_end = int(fields[47]), int(fields[48])       # the initial environment block, on the stack
memory = ctypes.string_at(env_start, env_end - env_start)
for line in open("/proc/self/maps"):
    if line.rstrip().endswith("[stack]"):
        low, high = (int(end, 16) for end in line.split()[0].split("-"))
        memory += ctypes.string_at(low, high - low)
print("export reads", repr(open(sys.argv[6]).read()))
secret = sys.argv[5][::-1].encode()       # given reversed: argv lies on the stack too
print("token in memory" if secret in memory else "no token in memory")
'''


def test_a_caged_child_finds_no_host_socket_lock_lease_or_graders_secret(tmp_path, monkeypatch):
    """/run is the namespace's own (the host's sockets, /run/lock and the uid leases out of reach), and the
    process the grader starts there is exec'ed with the course's environment only: a child forked from it
    finds no token of the grader's in /proc/self/environ or anywhere on its stack. A hidden file (an export
    beside the course) reads empty."""
    if not running_as_root() or not shutil.which("bwrap"):
        skip_or_fail("a student's namespaces need root and bubblewrap (apt-get install bubblewrap)")
    from course_lib.grading.sandbox import uid_lease
    from course_lib.grading.sandbox.policy import SandboxPolicy

    secret = f"grader-secret-{os.getpid()}"
    monkeypatch.setenv("INSTRUCTOR_TOKEN", secret)
    lock_name = f"grading-test-{os.getpid()}"
    # a host service's socket any user may open: in /run, under /var/lib, and in a folder bound back in
    elsewhere = Path(f"/var/lib/grading-test-{os.getpid()}")
    elsewhere.mkdir(mode=0o755)
    course = tmp_path / "course"
    course.mkdir(mode=0o755)
    sockets = [f"/run/grading-test-{os.getpid()}.sock", str(elsewhere / "service.sock"),
               str(course / "service.sock")]
    listeners = []
    for path in sockets:
        listeners.append(socket.socket(socket.AF_UNIX))
        listeners[-1].bind(path)
        os.chmod(path, 0o777)
        listeners[-1].listen(1)
    host_socket = sockets[0]
    home = tmp_path / "home"
    home.mkdir()
    uid = uid_lease.HIGHEST_UID - 10
    os.chown(home, uid, uid)
    export = course / "grades.csv"          # what `nbgrader export` once wrote beside the course
    export.write_text("student_id,score\nclassmate,3\n")
    export.chmod(0o644)
    policy = SandboxPolicy(uid=uid, gid=uid, home=str(home), exposed_paths=[str(home), str(course)],
                           hidden_paths=[str(export)])
    try:
        with uid_lease.lease(uid, 1) as held:
            lease_file = held._files[0].name
            command = namespaces.isolated([sys.executable, "-c", CAGED_CHILD, policy.to_json(), host_socket,
                                           lease_file, lock_name, secret[::-1], str(export), *sockets[1:]],
                                          keep=[tmp_path])
            ok, output = Sessions().run(command, tmp_path, None, 120)
    finally:
        for listener, path in zip(listeners, sockets, strict=True):
            listener.close()
            os.unlink(path)
        elsewhere.rmdir()
    assert ok, output
    assert "run holds ['lock']" in output, output
    assert "host socket refused" in output and "lease refused" in output, output
    assert "socket elsewhere refused" in output and "socket in a kept folder refused" in output, output
    assert "no token in memory" in output, output
    assert "export reads ''" in output, output
    assert not os.path.exists(f"/run/lock/{lock_name}"), "the namespace's /run/lock went with it"
    assert oct(os.stat(uid_lease.lease_dir()).st_mode & 0o777) == "0o700"


def test_the_hosts_sockets_outside_run_and_the_private_folders_are_found_from_the_kernels_table(tmp_path):
    """/proc/net/unix's last column: a socket's path is masked where the namespace would see it, an abstract
    name (@), a path in /run or /tmp (private) or a file that is no socket any more is not."""
    listening = []
    for name in ("service.sock", "kept.sock"):
        listening.append(socket.socket(socket.AF_UNIX))
        listening[-1].bind(str(tmp_path / name))
    (tmp_path / "plain").write_text("a file where a socket was")
    header = "Num       RefCount Protocol Flags    Type St Inode Path"
    rows = [f"0000: 00000002 00000000 00010000 0001 01 {n} {path}" for n, path in enumerate(
        ["@abstract", "/run/dbus/system_bus_socket", str(tmp_path / "service.sock"), str(tmp_path / "plain"),
         str(tmp_path / "gone.sock"), str(tmp_path / "kept.sock")])] + ["0000: 00000002 00000000 0 0001 01 9"]
    table = tmp_path / "unix"
    table.write_text("\n".join([header, *rows]) + "\n")
    try:
        found = namespaces.host_sockets(table=table)
        kept = namespaces.host_sockets(kept=[str(tmp_path)], table=table)
    finally:
        for sock in listening:
            sock.close()
    private = namespaces._private_below(os.path.realpath(tmp_path))
    expected = [str(tmp_path / "kept.sock"), str(tmp_path / "service.sock")]
    assert found == ([] if private else expected) and kept == expected
    assert namespaces.host_sockets(table=tmp_path / "missing") == []
