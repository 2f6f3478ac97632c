"""`make grade`: autograde a class in parallel sandboxes, re-check in isolation, merge, give feedback.

For each assignment: release it once into a template gradebook, vet every new or changed submission
(class_work: the others keep their grades), autograde each student in a private course (N at a time),
re-run the registered hidden checks in the isolated judge, keep the lower of the two scores per test
cell, merge into grading/gradebook.db one student at a time, then write HTML feedback,
grading/grades.csv and a summary table.
"""

from __future__ import annotations

import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path

import nbformat

from course_lib.grading.autograder import class_files, graded_record, preflight, report, scoring, submissions
from course_lib.grading.autograder.class_work import _nbgrader, assignment_names, collect_work
from course_lib.grading.autograder.judge import isolated_sources, load_registry, run_judge
from course_lib.grading.sandbox import uid_lease
from course_lib.grading.sandbox.failures import nbgrader_error
from course_lib.grading.sandbox.policy import SandboxPolicy, running_as_root
from course_lib.grading.sandbox.worker import AssignmentSetup, autograde, stop_all, student_policy
from course_lib.grading.settings import CODE_ROOT, CourseSettings, read_settings
from course_lib.grading.student_text import readable_tree
from course_lib.notebook_cells import lesson_imports


def checkout_settings() -> CourseSettings:
    """The checkout's own nbgrader_config.py (its course id, cell timeout, hidden checks and registry), so
    that a run built in code grades like `make grade`."""
    return read_settings(CODE_ROOT)


@dataclass
class GradingRun:
    """Where the course lives (``course_root``), what its config says (``course``: id, cell timeouts, hidden
    checks, registry; ``course.registry`` None: no isolated re-check) and how this run grades it."""

    course_root: Path
    course: CourseSettings = field(default_factory=checkout_settings)
    source_directory: str = "solutions"
    jobs: int = 2
    notebook_timeout: float = 900.0
    judge_timeout: float = 300.0
    max_output_bytes: int = 1_000_000
    policy: SandboxPolicy = field(default_factory=SandboxPolicy)
    feedback: bool = True
    recheck: bool = True             # the isolated judge (off only to measure what it costs)
    check_reference: bool = True     # grade solutions/ first; refuse the run unless full marks
    lease_uids: bool = True          # as root: move the sandbox uids to a range no other run holds
    regrade_all: bool = False        # grade the unchanged submissions again too (graded_record)
    also_hide: list[str] = field(default_factory=list)  # more folders student code must not see
    stream: object = None

    def __post_init__(self):
        if not isinstance(self.course, CourseSettings):
            raise ValueError(f"course must be a CourseSettings (read_settings(course_root), or "
                             f"dataclasses.replace of one), got {type(self.course).__name__}: {self.course!r}"
                             [:300])
        problems = self.course.problems()
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 1:
            problems.append(f"jobs must be a whole number of students graded at once, at least 1, got "
                            f"{self.jobs!r}")
        if problems:
            raise ValueError("this grading run cannot grade: " + "; ".join(problems))

    @property
    def grading_dir(self) -> Path:
        return self.course_root / "grading"

    @property
    def db_url(self) -> str:
        return f"sqlite:///{self.grading_dir / 'gradebook.db'}"

    def say(self, text: str) -> None:
        stream = self.stream or sys.stdout
        print(report.printable(text, stream), file=stream, flush=True)


def _grade_student(run: GradingRun, setup: AssignmentSetup, shape, submission, scratch: Path,
                   uid: int, registry: dict) -> scoring.Outcome:
    """Runs in a worker thread: the sandboxed autograde, then the isolated judge."""
    result = autograde(setup, submission.student, submission.files, scratch, uid)
    notebooks, verdicts = {}, {}
    folder = result.autograded_dir(setup.assignment)
    policy = student_policy(setup, uid, result.course_dir)
    for name, release in shape.release_notebooks.items():
        path = folder / f"{name}.ipynb"
        if not path.exists():  # nothing for the judge to check: its registered cells get no verdict, and 0
            verdicts[name] = scoring.unjudged(release, setup.assignment, registry)
            continue
        notebooks[name] = readable_tree(nbformat.read(path, as_version=4))   # written back in finish
        sources = (isolated_sources(notebooks[name], release, setup.assignment, registry)
                   if run.recheck else {})
        judge_dir = Path(tempfile.mkdtemp(prefix=f"judge-{name}-", dir=result.course_dir))
        verdicts[name] = run_judge(run.course.registry, run.course.hidden_checks, setup.assignment, sources,
                                   policy, judge_dir, run.judge_timeout, lesson_imports(release))
    return scoring.Outcome(submission, result.course_dir, result.ok, result.log, result.seconds, notebooks,
                           verdicts, regraded=result.regraded)


def _preflight(run: GradingRun, setups: list, scratch: Path, registry: dict, first_spare_uid: int) -> None:
    """Before anyone is graded: the sandbox can run the course's Python, and each reference solution
    scores full marks there (graded exactly as a student). Raises preflight.GradingRefused otherwise."""
    if not setups:
        return
    preflight.check_sandbox_reach(setups[0][0], scratch, first_spare_uid)
    if run.check_reference:
        def grade_one(setup, shape, submission, uid):
            return _grade_student(run, setup, shape, submission, scratch, uid, registry)
        preflight.check_references(run, setups, grade_one, first_spare_uid)


def sandbox_uids(run: GradingRun, count: int) -> uid_lease.UidLease | None:
    """As root, a range of `count` uids no other grading run on this machine holds; moves run.policy there."""
    if not (run.lease_uids and running_as_root()):
        return None
    held = uid_lease.lease(run.policy.uid, count)
    if held.first != run.policy.uid:
        run.say(f"sandbox uids {run.policy.uid}+ are in use by another grading run: using {held.first}+")
    run.policy = replace(run.policy, uid=held.first, gid=held.first)
    return held


def grade_all(run: GradingRun, targets: list[str], scratch: Path) -> list[report.StudentResult]:
    """Every (assignment, student) in one pool of `jobs` workers; merges happen here, one at a time."""
    registry = load_registry(run.course.registry) if run.course.registry else {}
    class_work = collect_work(run, targets, scratch)
    setups, work = class_work.setups, class_work.submissions
    held = sandbox_uids(run, len(work) + max(1, len(setups)))
    try:
        for setup, _ in setups:   # the kernels defer their hidden checks to the judge, when it runs
            setup.policy = replace(run.policy, judged_apart=run.recheck and bool(run.course.registry))
        _preflight(run, setups, scratch, registry, first_spare_uid=run.policy.uid + len(work))
        results = _grade_pool(run, work, scratch, registry)
    finally:
        if held:
            held.release()
    renewed = keep_unchanged(run, class_work.kept)
    if run.feedback:
        for assignment in sorted({r.assignment for r in results} | renewed):
            try:
                generate_feedback(run, assignment)
            except RuntimeError as error:  # a notebook nbgrader cannot render: noted for its student below
                run.say(f"{assignment}: nbgrader generate_feedback failed: {nbgrader_error(str(error))}")
            class_files.note_missing_feedback(run.grading_dir, assignment, results)
    return results


def keep_unchanged(run: GradingRun, kept: dict[str, list[str]]) -> set[str]:
    """Say which submissions keep their grades; their late penalties assigned again (a due date or an
    extension given since). The assignments whose feedback must be written again for a changed penalty."""
    renewed = set()
    for assignment, students in sorted(kept.items()):
        if students:
            run.say(f"{assignment}: {len(students)} submissions unchanged since they were graded keep their "
                    "grades (make grade REGRADE=1 grades them again)")
            if graded_record.refresh_penalties(run.db_url, assignment, students):
                renewed.add(assignment)
    return renewed


def generate_feedback(run: GradingRun, assignment: str) -> None:
    _nbgrader(run, run.course_root, "generate_feedback", assignment, "--force",
              f"--CourseDirectory.root={run.course_root}", f"--CourseDirectory.db_url={run.db_url}",
              "--CourseDirectory.autograded_directory=grading/autograded",
              "--CourseDirectory.feedback_directory=grading/feedback")


def _grade_pool(run: GradingRun, work: list, scratch: Path, registry: dict) -> list[report.StudentResult]:
    bar = report.ProgressBar(len(work), "grading", stream=run.stream)
    results = [scoring.refused_result(shape, sub) for _, shape, sub in work if sub.refused]
    for result in results:
        bar.advance(f"{result.assignment}/{result.student}: not graded")
    pool = ThreadPoolExecutor(max_workers=max(1, run.jobs))
    try:
        futures = {pool.submit(_grade_student, run, setup, shape, sub, scratch, run.policy.uid + i, registry):
                   (setup, shape, sub) for i, (setup, shape, sub) in enumerate(work) if not sub.refused}
        for future in as_completed(futures):
            setup, _, submission = futures[future]
            result = scoring.finish_or_fail(run, *futures[future], future)
            if not result.grader_failed:   # its grades are merged: the next run keeps them if unchanged
                graded_record.mark_graded(run.grading_dir, result.assignment, result.student,
                                          submission.fingerprint)
            results.append(result)
            bar.advance(f"{result.assignment}/{result.student}: {result.score:g}/{result.max_score:g}")
    except BaseException:  # Ctrl-C included: what is merged stays merged, the rest is stopped
        pool.shutdown(wait=False, cancel_futures=True)
        stop_all()
        raise
    pool.shutdown()
    return results


def grade(run: GradingRun, assignments: list[str] | None = None, zips: Path | None = None,
          zip_pattern: str = submissions.DEFAULT_ZIP_PATTERN) -> list[report.StudentResult]:
    """Grade the given assignments (default: every assignment with submissions); returns the results."""
    class_files.put_venv_on_path()
    run.grading_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(run.grading_dir, 0o700)  # the gradebook and every submission: the grader's alone
    if zips is not None:
        only = assignments[0] if assignments and len(assignments) == 1 else None
        class_files.unpack_zips(run.grading_dir, zips, zip_pattern, only, run.course.lms_late_tag)
    targets = assignments or assignment_names(run)
    with tempfile.TemporaryDirectory(prefix="course-grading-") as scratch_dir:
        scratch = Path(scratch_dir)
        os.chmod(scratch, 0o711)
        results = grade_all(run, targets, scratch)
    class_files.write_outputs(run.grading_dir, run.db_url, assignment_names(run), results)
    run.say(report.summary_table(results))
    return results
