"""What a grading run grades: each assignment released once into a template gradebook (and registered in
the class gradebook), and every submission of it read and vetted, except those graded already
(`graded_record`: unchanged since their grades were merged; ``GradingRun.regrade_all`` grades them too).
Shared by `make grade` (class_run) and its Slurm array (slurm/array_grading).
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat

from course_lib.grading.autograder import class_files, graded_record, submission_spool, submissions
from course_lib.grading.sandbox.worker import AssignmentSetup, run_tracked
from course_lib.grading.settings import CODE_ROOT

if TYPE_CHECKING:
    from course_lib.grading.autograder.class_run import GradingRun


@dataclass
class ClassWork:
    """``setups``: (AssignmentSetup, AssignmentShape) of each assignment with something to grade;
    ``submissions``: (setup, shape, Submission) to grade; ``kept``: assignment -> the students whose
    grades stand (unchanged since they were graded)."""

    setups: list = field(default_factory=list)
    submissions: list = field(default_factory=list)
    kept: dict[str, list[str]] = field(default_factory=dict)


def _nbgrader(run: GradingRun, cwd: Path, *args: str) -> None:
    command = [sys.executable, "-m", "nbgrader", *args, f"--CourseDirectory.course_id={run.course.course_id}",
               "--log-level=WARN"]
    ok, output = run_tracked(command, cwd, None, timeout=600)
    if not ok:
        raise RuntimeError(f"nbgrader {args[0]} failed:\n{output[-6000:]}")


def assignment_names(run: GradingRun) -> list[str]:
    source = run.course_root / run.source_directory
    return sorted(p.name for p in source.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def prepare(run: GradingRun, assignment: str,
            scratch: Path) -> tuple[AssignmentSetup, submissions.AssignmentShape]:
    """Release the assignment into a template gradebook (and register it in the course gradebook)."""
    source_dir = run.course_root / run.source_directory / assignment
    if not source_dir.is_dir():
        raise SystemExit(f"no assignment {assignment!r}: expected a folder {source_dir} "
                         f"(known: {', '.join(assignment_names(run)) or 'none'})")
    prep = scratch / f"prep-{assignment}"
    prep.mkdir(mode=0o700)  # holds the instructor's source and gradebook: never for student eyes
    shutil.copytree(source_dir, prep / "source" / assignment)
    common = [f"--CourseDirectory.root={prep}", "--CourseDirectory.source_directory=source",
              "--CourseDirectory.release_directory=release", "--force"]
    template = prep / "template.db"
    _nbgrader(run, prep, "generate_assignment", assignment, *common,
              f"--CourseDirectory.db_url=sqlite:///{template}")
    course_db = run.grading_dir / "gradebook.db"
    if course_db.exists():  # registers (or updates) the assignment next to the grades already there
        _nbgrader(run, prep, "generate_assignment", assignment, *common,
                  f"--CourseDirectory.db_url={run.db_url}")
    else:
        shutil.copyfile(template, course_db)
    release = {p.stem: nbformat.read(p, as_version=4)
               for p in sorted((prep / "release" / assignment).glob("*.ipynb"))}
    hidden = [str(root / name) for root in {run.course_root, CODE_ROOT}
              for name in (run.source_directory, "grading", ".git", "grades.csv")]  # nbgrader export's
    hidden += [str(path) for path in run.course.hidden_from_students] + run.also_hide
    setup = AssignmentSetup(course_id=run.course.course_id, assignment=assignment, source_dir=source_dir,
                            template_db=template, hidden_paths=hidden,
                            cell_timeout=run.course.cell_timeout_for(assignment),
                            notebook_timeout=run.notebook_timeout, max_output_bytes=run.max_output_bytes,
                            policy=run.policy, code_root=CODE_ROOT,
                            hidden_checks=tuple(str(folder) for folder in run.course.hidden_checks))
    return setup, submissions.AssignmentShape(assignment, release)


def _source_shapes(run: GradingRun) -> dict[str, submissions.AssignmentShape]:
    """Every assignment's source notebooks: enough to recognise a notebook submitted to the wrong one."""
    shapes = {}
    for name in assignment_names(run):
        folder = run.course_root / run.source_directory / name
        shapes[name] = submissions.AssignmentShape(
            name, {p.stem: nbformat.read(p, as_version=4) for p in sorted(folder.glob("*.ipynb"))})
    return shapes


def _class_of(run: GradingRun, assignment: str) -> list[str]:
    """The folder names under submitted/ that hold this assignment, as read from disk (checked later)."""
    submitted = run.grading_dir / "submitted"
    students = sorted(p.parent.name for p in submitted.glob(f"*/{assignment}") if p.is_dir())
    if not students:
        run.say(f"{assignment}: no submissions under {submitted}/<student>/{assignment}/")
    return students


def collect_work(run: GradingRun, targets: list[str], scratch: Path) -> ClassWork:
    """Each assignment with something to grade released once, and every vetted submission to grade (one
    the grader cannot take, for its id or its files, is refused alone: `Submission.refused`); those graded
    already and unchanged are kept (``ClassWork.kept``) unless ``run.regrade_all``."""
    shapes, refusals = _source_shapes(run), class_files.refused_zips(run.grading_dir)
    work = ClassWork()
    for assignment in targets:
        students = _class_of(run, assignment)
        refused_zips = sorted({s for s, a in refusals if a == assignment} - set(students))
        key = graded_record.grading_key(run.course_root / run.source_directory / assignment, run.course,
                                        assignment)
        prints = {s: graded_record.fingerprint(run.grading_dir / "submitted" / s / assignment, key)
                  for s in students if submissions.STUDENT_ID.match(s)}
        if not run.regrade_all:
            work.kept[assignment] = graded_record.unchanged(run.grading_dir, run.db_url, assignment, prints)
            students = [s for s in students if s not in work.kept[assignment]]
        if not students and not refused_zips:
            continue
        work.setups.append(prepare(run, assignment, scratch))
        setup, shape = work.setups[-1]
        others = {name: s for name, s in shapes.items() if name != assignment}
        for student in students:
            submission = submission_spool.read_submission(run.grading_dir / "submitted", student, shape,
                                                          others, scratch / "spool")   # bounded, on disk
            if submission.refused:
                run.say(f"{assignment}/{submission.student}: not graded: {submission.refused}")
            submission.fingerprint = prints.get(student, "")
            work.submissions.append((setup, shape, submission))
        for student in refused_zips:
            work.submissions.append((setup, shape, submissions.Submission(
                student, assignment, refused=refusals[(student, assignment)])))
    return work
