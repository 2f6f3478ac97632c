"""Reading faulthandler dumps: the blocked line is the innermost frame of the student's own code."""

from __future__ import annotations

import os

import torch

from course_lib.real.plumbing.backend import resolve_backend
from course_lib.real.plumbing.stacks import (
    BOOTSTRAP_FILE,
    Frame,
    blocked_line,
    is_user_frame,
    parse_faulthandler_dump,
)

TORCH_FILE = os.path.join(os.path.dirname(torch.__file__), "distributed", "distributed_c10d.py")

DUMP = f"""Thread 0x00007f00000001 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Current thread 0x00007f00000002 (most recent call first):
  File "{TORCH_FILE}", line 2400 in send
  File "/tmp/ipykernel_42/1234.py", line 7 in ring
  File "{BOOTSTRAP_FILE}", line 130 in run_child
  File "/tmp/notebook_cell.py", line 3 in <module>
"""


def test_a_dump_parses_into_threads_of_frames():
    threads = parse_faulthandler_dump(DUMP)
    assert [len(thread) for thread in threads] == [2, 4]
    assert threads[1][1] == Frame("/tmp/ipykernel_42/1234.py", 7, "ring")


def test_the_blocked_line_skips_torch_and_course_lib_and_picks_the_rank_thread():
    assert blocked_line(DUMP).startswith("/tmp/ipykernel_42/1234.py:7 in ring()")


def test_library_frames_are_not_user_frames():
    assert not is_user_frame(Frame(TORCH_FILE, 1, "send"))
    assert not is_user_frame(Frame(BOOTSTRAP_FILE, 1, "run_child"))
    assert not is_user_frame(Frame(os.__file__, 1, "fspath"))
    assert is_user_frame(Frame("<student cells>", 4, "ring_all_reduce"))
    assert is_user_frame(Frame("/home/student/exercise.py", 4, "ring_all_reduce"))


def test_no_user_frame_or_no_dump_still_says_something_useful():
    only_torch = f'Current thread 0x1 (most recent call first):\n  File "{TORCH_FILE}", line 9 in recv\n'
    assert blocked_line(only_torch).startswith("outside your code, in ")
    assert "did not answer" in blocked_line("")


def test_auto_backend_choice():
    expected = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= 2 else "gloo"
    assert resolve_backend("auto", 2) == expected and resolve_backend("gloo", 64) == "gloo"
