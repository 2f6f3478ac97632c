"""Neither load nor a neighbour changes a grade (issue 27): the shared run's kind of class graded while a
second grading run (another course, another process: `make grade` from a second checkout) grades at the
same time and CPU-bound processes keep every core busy, about 4x oversubscribed.

The reference answers (the probe's and chapter 08's, its capstone included) must score full marks, and an
endless loop must still cost its cell, within a bounded time. The load average is printed with the result.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from autograde_tests.support import neighbour_run, probe_course
from autograde_tests.support.chapter_classes import REPO, max_points, write_solution_student
from course_lib.grading.autograder import class_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
HOGS_PER_CORE = 3          # with the two grading runs' own processes: about 4x as much work as cores
CELL_TIMEOUT_S = 20        # the shared run's (conftest.graded_class): the setting that lost grades
BUSY_STRETCH = 6           # SandboxedExecute.busy_stretch
OWN_STUDENTS = ("full", "infinite_loop", "print_flood")
CHAPTER = neighbour_run.CHAPTER   # 08: its lesson and capstone run 8 ranks, the shared run's heaviest


def _start_hogs(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.kill()
    for process in processes:
        process.wait()


def test_solutions_score_full_marks_beside_a_second_grading_run_on_a_4x_oversubscribed_machine(tmp_path):
    root = probe_course.build(tmp_path / "course")
    neighbour_run.write_probe_students(root, OWN_STUDENTS)
    write_solution_student(root, CHAPTER, "chapter_solution")
    neighbour_root = neighbour_run.prepare(tmp_path / "neighbour")
    neighbour_results = tmp_path / "neighbour.json"
    neighbour = subprocess.Popen([sys.executable, "-m", "autograde_tests.support.neighbour_run",
                                  str(neighbour_root), str(neighbour_results)], cwd=REPO,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    hogs = _start_hogs(HOGS_PER_CORE * (os.cpu_count() or 1))
    try:
        start, loads = time.monotonic(), [os.getloadavg()[0]]
        results = {(r.assignment, r.student): r
                   for r in class_run.grade(neighbour_run.grading_run(root, cell_timeout=CELL_TIMEOUT_S),
                                            neighbour_run.HEAVIEST_FIRST)}
        loads.append(os.getloadavg()[0])
        seconds = time.monotonic() - start
        neighbour_output, _ = neighbour.communicate(timeout=1500)
    finally:
        _stop(hogs)
        if neighbour.poll() is None:
            _stop([neighbour])
    summary = {key: (r.score, r.max_score, r.notes, round(r.seconds)) for key, r in results.items()}
    print(f"graded in {seconds:.0f} s beside a second run and {len(hogs)} CPU hogs on {os.cpu_count()} "
          f"cores; load average {loads[0]:.1f} at the start, {loads[1]:.1f} at the end:", summary)

    chapter = results[(CHAPTER, "chapter_solution")]
    assert chapter.score == chapter.max_score == sum(max_points(CHAPTER).values()), summary
    for student in ("full", "print_flood"):
        assert results[("probe", student)].score == 3, summary
    endless = results[("probe", "infinite_loop")]
    assert endless.cells.get("test_scale", 0) == 0 and endless.cells.get("test_ring_pass") == 1, summary
    assert endless.needs_review, summary
    bound = 2 * (BUSY_STRETCH * CELL_TIMEOUT_S + 120)  # two attempts at most: the stretched limit + the rest
    assert endless.seconds < bound, f"the endless loop took {endless.seconds:.0f} s: {summary}"

    assert neighbour.returncode == 0, neighbour_output[-3000:]
    theirs = json.loads(neighbour_results.read_text())
    assert theirs["probe/full"][0] == 3 and theirs["probe/deadlock"][0] == 2, theirs
    score, maximum, _ = theirs[f"{CHAPTER}/neighbour_solution"]
    assert score == maximum, theirs
