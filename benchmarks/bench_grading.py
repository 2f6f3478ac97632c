"""Grading speed: seconds per chapter-02 submission with `make grade`'s pipeline vs plain nbgrader.

Grades a generated class (full, partial, empty, broken and wrong-neighbour submissions, cycling) with
the pipeline (parallel sandboxed workers + isolated re-check), then a subset of the same class with
plain sequential `nbgrader autograde` in an ordinary course folder, and prints seconds per submission
and the speed-up ratio. Run: .venv/bin/python benchmarks/bench_grading.py [--students 30]
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from course_lib.grading.autograder import class_run, demo  # noqa: E402
from course_lib.grading.settings import read_settings  # noqa: E402

ASSIGNMENT = "02_collectives"


def plain_nbgrader_seconds(demo_root: Path, students: list[str], scratch: Path, cell_timeout: int) -> float:
    """Plain nbgrader: one course folder, generate_assignment, then one sequential autograde."""
    course = scratch / "plain"
    shutil.copytree(ROOT / "solutions" / ASSIGNMENT, course / "source" / ASSIGNMENT)
    for student in students:
        shutil.copytree(demo_root / "grading" / "submitted" / student / ASSIGNMENT,
                        course / "submitted" / student / ASSIGNMENT)
    flags = [f"--CourseDirectory.root={course}", f"--CourseDirectory.db_url=sqlite:///{course}/gradebook.db",
             f"--ExecutePreprocessor.timeout={cell_timeout}", "--log-level=ERROR"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    python = [sys.executable, "-m", "nbgrader"]
    subprocess.run([*python, "generate_assignment", ASSIGNMENT, "--force", *flags], cwd=course, env=env,
                   check=True, capture_output=True)
    start = time.perf_counter()
    done = subprocess.run([*python, "autograde", ASSIGNMENT, "--force", "--create", *flags], cwd=course,
                          env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    graded = len(list((course / "autograded").glob(f"*/{ASSIGNMENT}/*.ipynb")))
    print(f"plain nbgrader autograded {graded} of {len(students)} (exit {done.returncode}; a broken notebook "
          "fails alone)")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--plain-students", type=int, default=10,
                        help="how many of the class plain nbgrader grades (same mix; it is the slow one)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    course = read_settings(ROOT)
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as scratch_dir:
        scratch = Path(scratch_dir)
        demo_root = scratch / "course"
        students = demo.write_class(ROOT, demo_root, ASSIGNMENT, args.students)
        run = class_run.GradingRun(course_root=demo_root, course=course, jobs=args.jobs, stream=io.StringIO())
        start = time.perf_counter()
        results = class_run.grade(run, [ASSIGNMENT])
        ours = (time.perf_counter() - start) / len(results)
        shutil.rmtree(demo_root / "grading" / "autograded")
        run.recheck, run.feedback = False, False
        start = time.perf_counter()
        class_run.grade(run, [ASSIGNMENT])
        bare = (time.perf_counter() - start) / len(results)
        subset = students[: args.plain_students]
        timeout = course.cell_timeout
        plain = plain_nbgrader_seconds(demo_root, subset, scratch, timeout) / len(subset)
    cores = os.cpu_count()
    print(f"machine: {cores} cores; class: {len(results)} submissions of {ASSIGNMENT} "
          f"(full, partial, empty, broken, wrong-neighbour, cycling)")
    print(f"make grade pipeline ({args.jobs} workers, sandbox + isolated re-check + feedback): "
          f"{ours:.1f} s per submission")
    print(f"plain sequential nbgrader autograde ({len(subset)} of them, no re-check, no feedback): "
          f"{plain:.1f} s per submission")
    print(f"the same pipeline without the isolated re-check and feedback: {bare:.1f} s per submission")
    print(f"speed-up vs plain nbgrader autograde: {plain / ours:.2f}x with everything, {plain / bare:.2f}x "
          f"for the same work (parallel sandboxed autograde); goal under 20 s per submission: "
          f"{'met' if ours < 20 else 'NOT met'}")


if __name__ == "__main__":
    main()
