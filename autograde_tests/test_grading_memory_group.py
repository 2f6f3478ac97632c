"""One student's memory bounded as a whole (issue 53, sandbox/memory_group.py): where the grader's memory
cgroup can have children, the processes of one student's grading command share one limit, however many
there are and however little each one holds."""

from __future__ import annotations

import subprocess
import sys

import pytest

from course_lib.grading.sandbox import memory_group
from course_lib.grading.sandbox.policy import MiB, running_as_root

V1_CGROUP = "5:devices:/\n4:memory:/process_api/abc\n0::/\n"
V1_MOUNTS = ("30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory\n"
             "31 25 0:27 / /sys/fs/cgroup/unified rw,relatime shared:10 - cgroup2 cgroup2 rw\n")
V2_CGROUP = "0::/user.slice/grader.scope\n"
V2_MOUNTS = "28 23 0:25 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def _files(tmp_path, cgroup: str, mounts: str):
    (tmp_path / "cgroup").write_text(cgroup)
    (tmp_path / "mountinfo").write_text(mounts)
    return tmp_path / "cgroup", tmp_path / "mountinfo"


def test_the_graders_memory_group_is_found_in_v1_and_in_a_v2_group_that_delegates_memory(tmp_path):
    assert memory_group.own_memory_group(*_files(tmp_path, V1_CGROUP, V1_MOUNTS)) == (
        "v1", memory_group.Path("/sys/fs/cgroup/memory/process_api/abc"))
    # v2: only where the grader's own group hands the memory controller to its children
    assert memory_group.own_memory_group(*_files(tmp_path, V2_CGROUP, V2_MOUNTS)) is None
    delegating = tmp_path / "fs"
    (delegating / "user.slice" / "grader.scope").mkdir(parents=True)
    (delegating / "user.slice" / "grader.scope" / "cgroup.subtree_control").write_text("cpu memory pids\n")
    mounts = V2_MOUNTS.replace("/sys/fs/cgroup", str(delegating))
    assert memory_group.own_memory_group(*_files(tmp_path, V2_CGROUP, mounts)) == (
        "v2", delegating / "user.slice" / "grader.scope")
    assert memory_group.own_memory_group(tmp_path / "none", tmp_path / "none") is None


def test_without_a_group_a_command_is_unchanged_and_nothing_is_made(tmp_path):
    with memory_group.student_group(61234, 100 * MiB, found=lambda: None) as group:
        assert group is None and memory_group.joined(["true"], 61234) == ["true"]
    assert memory_group.joined(["true"], None) == ["true"]


# Two processes of 120 MiB each: under every per-process limit, over the group's 160 MiB together.
TWO_HOGS = """import os, sys, time
size = int(sys.argv[1]) * 2**20
child = os.fork()
held = bytearray(size)
for i in range(0, size, 4096):
    held[i] = 1
time.sleep(0.5)
if child:
    _, status = os.waitpid(child, 0)
    sys.exit(1 if os.waitstatus_to_exitcode(status) else 0)
"""


def test_one_students_processes_share_one_limit():
    if not running_as_root():
        pytest.skip("a student's memory group is made by the grader as root")
    found = memory_group.own_memory_group()
    if found is None:
        pytest.skip("this machine's memory cgroup cannot have children with a limit (docs/grading.md: the "
                    "limits then stay per process)")
    uid = 63_990
    with memory_group.student_group(uid, 160 * MiB) as group:
        if group is None:
            pytest.skip(f"no memory group could be made under {found[1]} (read-only cgroup file system)")
        small = subprocess.run(memory_group.joined([sys.executable, "-c", TWO_HOGS, "40"], uid), timeout=60)
        large = subprocess.run(memory_group.joined([sys.executable, "-c", TWO_HOGS, "120"], uid), timeout=60)
    assert small.returncode == 0
    assert large.returncode != 0, "240 MiB in two processes fitted a 160 MiB group"
    assert not group.exists(), "the group is removed with the student"


def test_where_no_process_may_join_a_group_none_is_made(tmp_path, monkeypatch):
    monkeypatch.setattr(memory_group, "running_as_root", lambda: True)
    monkeypatch.setattr(memory_group, "can_join", lambda version, parent: False)
    with memory_group.student_group(61234, 100 * MiB, found=lambda: ("v1", tmp_path)) as group:
        assert group is None and memory_group.joined(["true"], 61234) == ["true"]
    assert list(tmp_path.iterdir()) == []
