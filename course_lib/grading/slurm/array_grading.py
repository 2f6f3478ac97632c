"""`make grade SLURM=1`: a class graded as a Slurm job array, then merged into the class gradebook.

The grader checks the sandbox and the reference solutions here first (as `make grade` does), shares the
new and changed submissions ("<student>/<assignment>"; the unchanged keep their grades, as in `make
grade`: autograder/graded_record) out over the array's tasks and submits it. Each task grades its share
with the usual pipeline (same sandbox, limits and isolated re-check) in its own work area under
grading/slurm/ (its own course root and gradebook) and marks it done. Only this process writes the
class gradebook: each done task's students are merged one at a time, so a task that dies or is
cancelled half-way changes nothing there.
Failed tasks (as sacct or scontrol report them) are re-submitted once; what still fails is reported
and its students keep the grades they had, until the next run grades the class again.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from course_lib.grading.autograder import class_files, class_run, gradebook_merge, graded_record, report
from course_lib.grading.autograder.judge import load_registry
from course_lib.grading.sandbox.policy import SandboxPolicy
from course_lib.grading.settings import CourseSettings
from course_lib.grading.slurm import array_tasks
from course_lib.real.cluster.slurm_jobs import run_slurm_command

SCRIPT = class_run.CODE_ROOT / "slurm" / "grade_array.sbatch"
HOLD_LIMIT_S = 600.0
# What a task takes over from the class's run besides its course settings, so that it grades exactly as
# `make grade` would.
PLAN_SETTINGS = ("source_directory", "notebook_timeout", "judge_timeout", "max_output_bytes", "recheck")


def _settings(plan: dict) -> dict:
    return {"course": CourseSettings.from_plain(plan["course"]),
            **{name: plan[name] for name in PLAN_SETTINGS}}


def _task_dir(work: Path, index: int) -> Path:
    return work / f"task-{index}"


def write_plan(run: class_run.GradingRun, work: Path, targets: list[str], shares: list[list[str]],
               fingerprints: dict[str, str] | None = None) -> None:
    """plan.json (what every task grades, and how, and the fingerprint of each submission it grades)."""
    plan = {"course_root": str(run.course_root), "targets": targets, "fingerprints": fingerprints or {},
            "course": run.course.to_plain(), **{name: getattr(run, name) for name in PLAN_SETTINGS},
            "policy": {**asdict(run.policy), "hidden_paths": [], "exposed_paths": [], "home": None},
            "shares": shares}
    work.mkdir(parents=True, mode=0o700)
    (work / "plan.json").write_text(json.dumps(plan, indent=1))


def _fresh_task_root(plan: dict, work: Path, index: int) -> Path:
    """The task's own course: nothing left from an earlier attempt."""
    root = _task_dir(work, index)
    shutil.rmtree(root, ignore_errors=True)
    (root / "grading" / "submitted").mkdir(parents=True)
    course = Path(plan["course_root"])
    source = plan["source_directory"]
    (root / source).symlink_to((course / source).resolve(), target_is_directory=True)
    for key in plan["shares"][index]:   # "<student>/<assignment>": linked alone, the student's others not
        folder = root / "grading" / "submitted" / key
        folder.parent.mkdir(exist_ok=True)
        folder.symlink_to(course / "grading" / "submitted" / key, target_is_directory=True)
    return root


def grade_task(work: Path, index: int, jobs: int) -> list[report.StudentResult]:
    """Inside array task `index`: grade its share into its own gradebook, then write done.json."""
    plan = json.loads((work / "plan.json").read_text())
    root = _fresh_task_root(plan, work, index)
    settings = _settings(plan)
    course = Path(plan["course_root"])  # its grades and answers stay hidden from the students' code
    run = class_run.GradingRun(course_root=root, jobs=jobs, feedback=False, check_reference=False,
                              also_hide=[str(course / "grading"), str(course / plan["source_directory"])],
                              **settings)
    run.policy = SandboxPolicy(**plan["policy"])
    results = class_run.grade(run, plan["targets"])
    _hold_if_asked(index)
    done = root / "done.json"
    done.with_suffix(".partial").write_text(json.dumps([r.__dict__ for r in results]))
    done.with_suffix(".partial").replace(done)
    return results


def _hold_if_asked(index: int) -> None:
    """For the test of a task killed half-way (tests/slurm/test_grading_array.py); does nothing unless
    COURSE_GRADE_HOLD_TASK=<index>:<folder> names this task. Its share graded into its own gradebook but
    not yet marked done, the task writes <folder>/held-N ("PID JOB_TASK"; N counts its arrivals here, so
    a re-queued task writes held-2) and waits until <folder>/go-N exists or it is killed, at most
    HOLD_LIMIT_S: a test acts at a known point instead of racing the task."""
    wanted, _, folder = os.environ.get("COURSE_GRADE_HOLD_TASK", "").partition(":")
    if not folder or wanted != str(index):
        return
    arrival = 1 + len(list(Path(folder).glob("held-*")))
    held = Path(folder) / f"held-{arrival}"
    held.with_suffix(".partial").write_text(f"{os.getpid()} {os.environ.get('SLURM_ARRAY_JOB_ID')}_{index}")
    held.with_suffix(".partial").replace(held)
    deadline = time.monotonic() + HOLD_LIMIT_S
    while not (Path(folder) / f"go-{arrival}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)


def merge_task(run: class_run.GradingRun, work: Path, index: int) -> list[report.StudentResult]:
    """Copy a done task's grades (scores, review flags, autograded notebooks) into the class's."""
    root = _task_dir(work, index)
    fingerprints = json.loads((work / "plan.json").read_text()).get("fingerprints", {})
    task_db = f"sqlite:///{root / 'grading' / 'gradebook.db'}"
    merged = []
    for entry in json.loads((root / "done.json").read_text()):
        result = report.StudentResult(**entry)
        if result.refused:   # as `make grade` has it: 0 in grades.csv, no student of that id in the gradebook
            merged.append(result)
            continue
        scores = gradebook_merge.read_autograded_scores(task_db, result.assignment, result.student)
        cells = gradebook_merge.merge_student(run.db_url, result.assignment, result.student, scores, set(),
                                              review_all=bool(result.notes))
        relative = Path("autograded") / result.student / result.assignment
        class_files.replace_tree(root / "grading" / relative, run.grading_dir / relative)
        result.score, result.max_score = cells.score, cells.max_score
        result.cells = {c.cell: c.points for c in cells.cells}
        if not result.grader_failed:
            graded_record.mark_graded(run.grading_dir, result.assignment, result.student,
                                      fingerprints.get(f"{result.student}/{result.assignment}", ""))
        merged.append(result)
    return merged


def _check_class(run: class_run.GradingRun, targets: list[str]) -> tuple[dict[str, str], set[str]]:
    """Register the assignments in the class gradebook and run the preflight; the submissions to grade
    ("<student>/<assignment>" -> fingerprint) and the assignments whose feedback a changed late penalty
    of an unchanged submission renews."""
    registry = load_registry(run.course.registry) if run.course.registry else {}
    with tempfile.TemporaryDirectory(prefix="course-grading-") as scratch_dir:
        scratch = Path(scratch_dir)
        scratch.chmod(0o711)
        work = class_run.collect_work(run, targets, scratch)
        held = class_run.sandbox_uids(run, max(1, len(work.setups)))
        try:
            class_run._preflight(run, work.setups, scratch, registry, first_spare_uid=run.policy.uid)
        finally:
            if held:
                held.release()
    renewed = class_run.keep_unchanged(run, work.kept)
    return {f"{sub.student}/{sub.assignment}": sub.fingerprint for _, _, sub in work.submissions}, renewed


def _run_array(run: class_run.GradingRun, options: array_tasks.ArrayOptions, work: Path, indices: list[int],
               largest_share: int) -> dict[int, tuple[str, str]]:
    command = array_tasks.sbatch_command(options, SCRIPT, work, indices, largest_share)
    environment = dict(os.environ, COURSE_DIR=str(class_run.CODE_ROOT))
    submitted = run_slurm_command(command, environment, 120, cwd=work)
    if submitted.returncode != 0:
        raise SystemExit(f"sbatch refused the grading array: {submitted.stderr.strip()}\n"
                         f"command: {' '.join(command)}")
    job_id = submitted.stdout.strip().split(";")[0]
    run.say(f"submitted job array {job_id} (tasks {','.join(map(str, indices))}); logs: {work}/task-*.out")
    return array_tasks.wait_for(job_id, indices, options, say=run.say)


def grade_on_slurm(run: class_run.GradingRun, options: array_tasks.ArrayOptions,
                   assignments: list[str] | None = None) -> list[report.StudentResult]:
    """Grade the class as a job array; returns the merged results (raises if a task failed twice)."""
    if shutil.which("sbatch") is None:
        raise SystemExit("--slurm (make grade SLURM=1) submits a Slurm job array, but sbatch is not on PATH: "
                         "run it on a node that can submit jobs (a login node), or grade without --slurm")
    class_files.put_venv_on_path()
    run.grading_dir.mkdir(parents=True, exist_ok=True)
    run.grading_dir.chmod(0o700)
    targets = assignments or class_run.assignment_names(run)
    fingerprints, renewed = _check_class(run, targets)
    shares = array_tasks.split(sorted(fingerprints), options.tasks) if fingerprints else []
    work = run.grading_dir / "slurm" / time.strftime("run-%Y%m%d-%H%M%S")
    write_plan(run, work, targets, shares, fingerprints)
    largest = max((len(share) for share in shares), default=0)
    pending, results, failed = list(range(len(shares))), [], {}
    for attempt in (1, 2):
        if not pending:
            break
        states = _run_array(run, options, work, pending, largest)
        finished = {i for i in pending if (_task_dir(work, i) / "done.json").exists()}
        for index in sorted(finished & {i for i, (s, _) in states.items() if s == "COMPLETED"}):
            results += merge_task(run, work, index)
        failed = {i: states[i] for i in pending if i not in finished or states[i][0] != "COMPLETED"}
        retry = array_tasks.to_retry(failed, finished) if attempt == 1 else []
        for index, (state, code) in failed.items():
            again = "re-submitting it once" if index in retry else "not re-submitted"
            run.say(f"task {index} ({len(shares[index])} students) ended {state} (exit {code}): {again}")
        pending = retry
    if run.feedback:
        for assignment in sorted({r.assignment for r in results} | renewed):
            class_run.generate_feedback(run, assignment)
    class_files.write_outputs(run.grading_dir, run.db_url, class_run.assignment_names(run), results)
    run.say(report.summary_table(results))
    if failed:
        missing = sorted(key for i in failed for key in shares[i])
        raise SystemExit(f"{len(missing)} students not graded (their grades are unchanged): "
                         f"{', '.join(missing)}. Logs: {work}/task-*.out; grade again to finish the class")
    shutil.rmtree(work.parent, ignore_errors=True)  # this run's work and the logs of earlier, failed ones
    return results
