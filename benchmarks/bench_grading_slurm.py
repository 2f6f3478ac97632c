"""Grading on Slurm: seconds per submission of a 30-student demo class graded as a job array of 1 and
of 4 tasks on the local single-node Slurm (make slurm-up), and the speed-up 4 tasks give.

The class is the probe assignment of the grading tests (autograde_tests/support/probe_course.py), so the
figure is the array's own cost and gain, not a chapter's lesson. Each task grades one student at a time
(--cpus-per-task=1): on a node of N cores at most N tasks run at once. Prints medians of --repeats runs
and the load average. Run as root: .venv/bin/python benchmarks/bench_grading_slurm.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autograde_tests.support import probe_course  # noqa: E402
from course_lib.grading.autograder import class_run, demo  # noqa: E402
from course_lib.grading.slurm import array_grading, array_tasks  # noqa: E402


def seconds_per_submission(course: Path, root: Path, students: int, tasks: int) -> float:
    class_root = root / f"class-{tasks}"
    demo.write_class(course, class_root, "probe", students)
    run = class_run.GradingRun(course_root=class_root, course=probe_course.PROBE_SETTINGS,
                               feedback=False, check_reference=False, stream=io.StringIO())
    options = array_tasks.ArrayOptions(tasks=tasks, cpus_per_task=1, poll_seconds=0.5, max_wait_s=1800)
    start = time.perf_counter()
    array_grading.grade_on_slurm(run, options, ["probe"])
    return (time.perf_counter() - start) / students


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("SLURM_CONF", os.path.join(os.environ.get("TMPDIR", "/tmp"), "course-slurm", "etc",
                                                     "slurm.conf"))
    with tempfile.TemporaryDirectory(prefix="bench-grading-slurm-") as scratch:
        root = Path(scratch)
        root.chmod(0o755)
        course = probe_course.build(root / "course")
        timings = {1: [], 4: []}
        for _ in range(args.repeats):
            for tasks in timings:
                timings[tasks].append(seconds_per_submission(course, root, args.students, tasks))
    one, four = (statistics.median(timings[t]) for t in (1, 4))
    load = os.getloadavg()
    print(f"{args.students} submissions of the probe assignment on the local Slurm ({os.cpu_count()} cores), "
          f"median of {args.repeats}; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    print(f"1 array task:  {one:.2f} s per submission")
    print(f"4 array tasks: {four:.2f} s per submission")
    print(f"speed-up of 4 tasks over 1: {one / four:.2f}x")


if __name__ == "__main__":
    main()
