"""The shared process primitives: a call in a fresh child under limits, one reaper, named rank outcomes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from course_lib.real.launch.rank_outcome import RankRaised, RankReturned, from_wire, to_wire
from course_lib.real.plumbing.processes import (
    ChildLimitError,
    Sessions,
    call_in_fresh_child,
    kill_and_reap,
    kill_processes_of_uid,
)


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


def test_a_session_keeps_only_the_tail_of_a_flood(tmp_path):
    import tracemalloc

    flood = "import sys; [sys.stdout.write('x' * 1_000_000) for _ in range(50)]; print('END')"
    tracemalloc.start()
    try:
        ok, output = Sessions().run([sys.executable, "-c", flood], tmp_path, None, 60, keep_bytes=4096)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert ok and len(output) <= 4096 and output.endswith("END\n")
    assert peak < 4 * 2**20, f"50 MB of output held {peak / 2**20:.0f} MiB in the grading parent"


def test_a_descendant_holding_the_pipe_does_not_stretch_the_limit(tmp_path):
    # the command exits at once; its grandchild, in a session of its own, keeps the pipe open 30 s
    holder = ("import os, subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; "
              "time.sleep(30)'], start_new_session=True); print('parent done')")
    start = time.monotonic()
    ok, output = Sessions().run([sys.executable, "-c", holder], tmp_path, None, 3)
    assert time.monotonic() - start < 5 and ok and "parent done" in output
    # and past the limit, a holder in its own session does not keep the run waiting either
    start = time.monotonic()
    ok, output = Sessions().run([sys.executable, "-c", holder + "; import time; time.sleep(60)"], tmp_path,
                                None, 2)
    assert time.monotonic() - start < 5 and not ok and output.startswith("stopped after 2 s")


REFORKING_DAEMON = """import os, sys, time
stop = time.monotonic() + 20          # bounded: it stops by itself after 20 s
while time.monotonic() < stop:
    if os.fork():
        os._exit(0)                   # the parent exits: the child lives on, detached
    os.setsid()
    time.sleep(0.005)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="running a process under another uid needs root")
def test_the_uid_sweep_outlasts_a_daemon_that_reforks():
    subprocess.Popen(["setpriv", "--reuid=64171", "--regid=64171", "--clear-groups", sys.executable, "-c",
                      REFORKING_DAEMON], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).wait(10)
    time.sleep(0.3)
    assert kill_processes_of_uid(64171) == 0
    time.sleep(0.5)
    assert _live_processes_of(64171) == []


def _live_processes_of(uid: int) -> list[str]:
    """The pids of uid's processes that still run (a zombie waits only for its parent to reap it)."""
    live = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read()
            if os.stat(f"/proc/{pid}").st_uid == uid and stat[stat.rindex(")") + 2] not in "ZX":
                live.append(pid)
        except OSError:
            continue
    return live
