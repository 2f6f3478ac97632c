"""Command line of the grading backend: ``grade`` (the class's submissions), ``extend``, ``export``, ``demo``.

    python -m course_lib.grading.cli grade [--assignment A] [--zips DIR] [--jobs N] [--regrade] [--slurm]
    python -m course_lib.grading.cli extend --assignment A --student S [--days D] [--hours H]
    python -m course_lib.grading.cli export      (grading/exports/: grades and feedback for Canvas, Moodle)
    python -m course_lib.grading.cli demo [--assignment A] [--students N] [--into DIR] [--slurm]
    python -m course_lib.grading.cli grade-task WORK INDEX   (one task of a --slurm job array)
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from course_lib.grading.autograder import (
    class_files,
    class_run,
    demo,
    extensions,
    lms_export,
    lms_feedback,
    submissions,
)
from course_lib.grading.sandbox.policy import SandboxPolicy, running_as_root
from course_lib.grading.settings import CODE_ROOT, read_settings
from course_lib.grading.slurm import array_grading, array_tasks

ROOT = CODE_ROOT


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m course_lib.grading.cli", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    grade = commands.add_parser("grade", help="autograde grading/submitted/<student>/<assignment>/")
    grade.add_argument("--assignment", action="append", help="only this assignment (repeatable)")
    grade.add_argument("--zips", type=Path, help="a folder of <student>__<assignment>.zip to collect first")
    grade.add_argument("--zip-pattern", default=submissions.DEFAULT_ZIP_PATTERN,
                       help="named regexp for zip names: groups student_id and optional assignment_id")
    grade.add_argument("--regrade", action="store_true",
                       help="grade every submission again, the unchanged too (default: only new or changed)")
    extend = commands.add_parser("extend", help="give a student more time on an assignment (0 and 0: none)")
    extend.add_argument("--assignment", required=True)
    extend.add_argument("--student", required=True)
    extend.add_argument("--days", type=float, default=0)
    extend.add_argument("--hours", type=float, default=0)
    commands.add_parser("export", help="grades and feedback for Canvas and Moodle, in grading/exports/")
    demo_cmd = commands.add_parser("demo", help="grade a generated demo class end to end")
    demo_cmd.add_argument("--assignment", help="chapter to build the class from (default: the latest graded)")
    demo_cmd.add_argument("--students", type=int, default=4)
    demo_cmd.add_argument("--into", type=Path, default=ROOT / "grading" / "demo",
                          help="folder of the demo course, replaced on every run (default: grading/demo)")
    for command in (grade, demo_cmd):
        command.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)),
                             help="students graded at once (default: cores, at most 4)")
        command.add_argument("--cell-timeout", type=int,
                             help="seconds per cell (default: nbgrader_config.py)")
        command.add_argument("--first-uid", type=int, default=SandboxPolicy.uid,
                             help="as root: student code runs as uids from this one up, one per submission "
                                  "(default: %(default)s; moved up past uids another grading run holds)")
        _slurm_options(command)
    task = commands.add_parser("grade-task", help="one task of a --slurm job array (run by Slurm)")
    task.add_argument("work", type=Path)
    task.add_argument("index", type=int)
    task.add_argument("--jobs", type=int, default=1)
    return parser


def _slurm_options(command: argparse.ArgumentParser) -> None:
    group = command.add_argument_group("grading as a Slurm job array",
                                       "defaults: COURSE_GRADE_* in the environment or slurm/site.sh")
    group.add_argument("--slurm", action="store_true", help="grade as a job array on the Slurm cluster")
    group.add_argument("--tasks", type=int, help="array tasks the class is shared among (default 4)")
    group.add_argument("--partition", help="Slurm partition (default: the cluster's or SBATCH_PARTITION)")
    group.add_argument("--account", help="Slurm account to charge (default: yours or SBATCH_ACCOUNT)")
    group.add_argument("--minutes-per-submission", type=float,
                       help="sets each task's --time: this times its submissions, plus 5 (default 5)")
    group.add_argument("--cpus-per-task", type=int, help="cores per task = students it grades at once (1)")


def _array_options(args) -> array_tasks.ArrayOptions:
    settings = array_tasks.site_settings(ROOT, dict(os.environ))
    for name in ("tasks", "partition", "account", "minutes_per_submission", "cpus_per_task"):
        if getattr(args, name) is not None:
            settings[name] = getattr(args, name)
    return array_tasks.ArrayOptions(**settings)


def _grade(run: class_run.GradingRun, args, assignments: list[str] | None) -> list:
    if args.slurm:
        return array_grading.grade_on_slurm(run, _array_options(args), assignments)
    return class_run.grade(run, assignments, getattr(args, "zips", None),
                           getattr(args, "zip_pattern", submissions.DEFAULT_ZIP_PATTERN))


def _run(course_root: Path, args) -> class_run.GradingRun:
    course = read_settings(ROOT)
    if args.cell_timeout:
        course = replace(course, cell_timeout=args.cell_timeout)
    if not running_as_root():
        print("note: not running as root, so student code runs under your own user id and can read the "
              "course's files (see README.md, 'Without root')", file=sys.stderr)
    policy = SandboxPolicy(uid=args.first_uid, gid=args.first_uid)
    return class_run.GradingRun(course_root=course_root, course=course, jobs=args.jobs, policy=policy,
                                regrade_all=getattr(args, "regrade", False))


def _export(grading_dir: Path) -> int:
    """The grades as Canvas and Moodle import them, and the zip students' feedback bundled for upload."""
    try:
        written = lms_export.write_exports(grading_dir)
    except FileNotFoundError as error:
        print(error, file=sys.stderr)
        return 1
    bundles, left_out = lms_feedback.write_bundles(grading_dir)
    for name, path in {**written, **{f"feedback {k}": v for k, v in bundles.items()}}.items():
        print(f"{name}: {path}")
    for line in left_out:
        print(f"feedback left out: {line}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "grade-task":
        array_grading.grade_task(args.work.resolve(), args.index, args.jobs)
        return 0
    if args.command == "export":
        return _export(ROOT / "grading")
    if args.command == "extend":
        try:
            print(extensions.grant(ROOT / "grading", args.assignment, args.student, args.days, args.hours))
        except ValueError as error:
            print(error, file=sys.stderr)
            return 1
        return 0
    if args.command == "grade":
        if args.slurm and args.zips:
            class_files.unpack_zips(ROOT / "grading", args.zips, args.zip_pattern,
                                    args.assignment[0] if args.assignment else None,
                                    read_settings(ROOT).lms_late_tag)
        results = _grade(_run(ROOT, args), args, args.assignment)
        print(f"grades: {ROOT / 'grading' / 'grades.csv'}; feedback: {ROOT / 'grading' / 'feedback'}/")
        return 0 if results is not None else 1
    assignment = args.assignment or demo.demo_assignment(ROOT)
    demo_root = args.into.resolve()
    students = demo.write_class(ROOT, demo_root, assignment, args.students)
    print(f"demo class of {len(students)} for {assignment} in {demo_root}/grading/submitted")
    _grade(_run(demo_root, args), args, [assignment])
    print(f"grades: {demo_root / 'grading' / 'grades.csv'}; feedback: {demo_root / 'grading' / 'feedback'}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
