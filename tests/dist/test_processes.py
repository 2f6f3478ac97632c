"""The shared process primitives: a call in a fresh child under limits, one reaper, named rank outcomes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from course_lib.dist.processes import (
    ChildLimitError,
    Sessions,
    call_in_fresh_child,
    kill_and_reap,
    kill_processes_of_uid,
)
from course_lib.dist.rank_outcome import RankRaised, RankReturned, from_wire, to_wire


def test_a_fresh_child_sends_back_bytes_and_cannot_change_the_parent():
    os.environ.pop("COURSE_TEST_CHILD_MARK", None)

    def work():
        os.environ["COURSE_TEST_CHILD_MARK"] = "1"
        return b"hello"

    assert call_in_fresh_child(work, timeout=20, max_bytes=100) == b"hello"
    assert "COURSE_TEST_CHILD_MARK" not in os.environ


def test_a_child_that_dies_sends_nothing():
    assert call_in_fresh_child(lambda: os._exit(3), timeout=20, max_bytes=100) == b""


@pytest.mark.parametrize("work, limit, message", [
    (lambda: time.sleep(60) or b"", {"timeout": 0.5, "max_bytes": 100}, "did not return within 0.5 s"),
    (lambda: b"x" * (3 << 20), {"timeout": 20, "max_bytes": 2 << 20}, "returned more than 2 MiB"),
])
def test_limits_end_the_child_with_a_clear_error(work, limit, message):
    with pytest.raises(ChildLimitError, match=message):
        call_in_fresh_child(work, **limit)


def test_kill_and_reap_leaves_no_child():
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    kill_and_reap([pid])
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def test_outcomes_survive_the_wire_and_anything_else_is_refused():
    for outcome in (RankReturned([1, 2]), RankRaised("ValueError", "bad", "Traceback ...\n", None)):
        assert from_wire(to_wire(outcome)) == outcome
    assert RankRaised("E", "", "").failed and not RankReturned(0).failed
    with pytest.raises(ValueError, match="not a result this launcher sends"):
        from_wire(("ok", 1, 2))


def test_a_session_reports_its_output_and_a_timeout_kills_all_it_started(tmp_path):
    sessions = Sessions()
    assert sessions.run([sys.executable, "-c", "print('hi')"], tmp_path, None, 20) == (True, "hi\n")
    marker = tmp_path / "grandchild.pid"
    script = (f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; "
              f"time.sleep(60)']); open({str(marker)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    ok, output = sessions.run([sys.executable, "-c", script], tmp_path, None, 3, tag="uid 61001")
    assert not ok and output.startswith("stopped after 3 s (its time limit)")
    grandchild = int(marker.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and os.path.exists(f"/proc/{grandchild}"):
        time.sleep(0.05)  # killed with its session; reaped by init once it is gone
    assert not os.path.exists(f"/proc/{grandchild}") or "zombie" in open(f"/proc/{grandchild}/status").read()
    assert sessions.kill_all() == []


def test_kill_all_ends_running_sessions_and_names_them(tmp_path):
    import threading

    sessions, outcome = Sessions(), []
    worker = threading.Thread(target=lambda: outcome.append(
        sessions.run([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path, None, 60, tag=61002)))
    worker.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not sessions._live:
        time.sleep(0.02)
    assert sessions.kill_all() == [61002]
    worker.join(10)
    assert outcome and outcome[0][0] is False


def test_a_timed_out_session_names_the_limit_it_ran_into(tmp_path):
    ok, output = Sessions().run([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path, None, 1,
                                limit_name="the whole notebook's time limit")
    assert not ok and output.startswith("stopped after 1 s (the whole notebook's time limit)")


@pytest.mark.skipif(os.geteuid() != 0, reason="running a process under another uid needs root")
def test_kill_processes_of_uid_ends_what_runs_as_that_uid_and_spares_our_own():
    sleeper = subprocess.Popen(["setpriv", "--reuid=64170", "--regid=64170", "--clear-groups", "sleep", "30"])
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and os.stat(f"/proc/{sleeper.pid}").st_uid != 64170:
            time.sleep(0.02)  # setpriv drops to the uid just before it execs sleep
        kill_processes_of_uid(os.getuid())   # a no-op: the grader's own uid is never swept
        assert sleeper.poll() is None
        kill_processes_of_uid(64170)
        assert sleeper.wait(10) == -9
    finally:
        sleeper.kill()
        sleeper.wait()
