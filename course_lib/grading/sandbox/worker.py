"""Autograde one student's submission with nbgrader inside a private, throw-away course directory.

Each student gets a temporary course (the assignment's source, a copy of a template gradebook, the
submission, a sandboxed kernelspec), so a hostile kernel can reach neither the real gradebook nor
another student's files. The parent merges the result into the real gradebook afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from course_lib.grading.sandbox import failures
from course_lib.grading.sandbox.memory_group import joined, student_group
from course_lib.grading.sandbox.namespaces import isolated
from course_lib.grading.sandbox.policy import SandboxPolicy, running_as_root
from course_lib.grading.settings import HIDDEN_CHECKS_ENV, code_root_for_fresh_pythons
from course_lib.real.plumbing.processes import Sessions, kill_processes_of_uid

KERNEL_NAMES = ("distributed-course", "python3")
# `nbgrader autograde` runs as root, outside the sandbox's limits, and holds what the kernel sends: it
# grew to 1.4 GB under a flood (issue 53). Bounded by the output and widget caps, it needs ~300 MB; past
# this limit it fails (MemoryError) and that student's notebook scores 0, flagged.
NBGRADER_MEMORY_BYTES = 2 * 1024**3
LIMIT_THEN_EXEC = ("import os, resource, sys\n"
                   "soft, hard = resource.getrlimit(resource.RLIMIT_AS)\n"
                   "wanted = int(sys.argv[1]) if hard < 0 else min(int(sys.argv[1]), hard)  # -1: none\n"
                   "resource.setrlimit(resource.RLIMIT_AS, (wanted, hard))\n"
                   "os.execv(sys.argv[2], sys.argv[2:])")
AUTOGRADE_PREPROCESSORS = (
    "course_lib.grading.sandbox.execute.SandboxedExecute", "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor", "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades", "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata")


@dataclass
class AssignmentSetup:
    """Everything the workers share for one assignment, prepared once by the parent."""

    course_id: str
    assignment: str
    source_dir: Path                 # solutions/<assignment>
    template_db: Path                # gradebook holding only this assignment's structure
    hidden_paths: list[str]          # paths the student's kernel must not see
    cell_timeout: int = 120
    notebook_timeout: float = 900.0  # the whole autograde of one student, a backstop behind cells
    max_output_bytes: int = 1_000_000
    policy: SandboxPolicy = field(default_factory=SandboxPolicy)
    code_root: Path | None = None    # the checkout course_lib runs from: the sandbox must reach it
    hidden_checks: tuple[str, ...] = ()   # the instructor's hidden-check folders, for hidden test cells


@dataclass
class AutogradeRun:
    student: str
    ok: bool
    seconds: float
    course_dir: Path
    log: str = ""
    regraded: str = ""   # why a first attempt was set aside (failures.machine_fault), if one was

    @property
    def db_path(self) -> Path:
        return self.course_dir / "db" / "gradebook.db"

    def autograded_dir(self, assignment: str) -> Path:
        return self.course_dir / "autograded" / self.student / assignment


def _config_text(setup: AssignmentSetup, course_dir: Path) -> str:
    settings = {
        "CourseDirectory.root": str(course_dir), "CourseDirectory.course_id": setup.course_id,
        "CourseDirectory.source_directory": "source", "CourseDirectory.submitted_directory": "submitted",
        "CourseDirectory.autograded_directory": "autograded",
        "CourseDirectory.db_url": f"sqlite:///{course_dir / 'db' / 'gradebook.db'}",
        "CourseDirectory.ignore": [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".*"],
        "Autograde.autograde_preprocessors": list(AUTOGRADE_PREPROCESSORS),
        "Autograde.create_student": True,
        "OverwriteCells.add_missing_cells": True,  # a deleted test cell is put back and run
        "SandboxedExecute.timeout": setup.cell_timeout, "SandboxedExecute.interrupt_on_timeout": True,
        "SandboxedExecute.max_output_bytes": setup.max_output_bytes,
        "SandboxedExecute.startup_timeout": 120,
        "LimitOutput.max_lines": 2000,
    }
    lines = ["c = get_config()  # noqa: F821"]
    lines += [f"c.{key} = {value!r}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


def _write_kernelspecs(jupyter_dir: Path, policy_file: Path, hidden_checks: tuple[str, ...]) -> None:
    for name in KERNEL_NAMES:
        spec_dir = jupyter_dir / "kernels" / name
        spec_dir.mkdir(parents=True)
        spec = {"argv": [sys.executable, "-m", "course_lib.grading.sandbox.kernel", str(policy_file),
                         "-f", "{connection_file}"],
                "display_name": f"{name} (grading sandbox)", "language": "python",
                "env": {HIDDEN_CHECKS_ENV: os.pathsep.join(hidden_checks)} if hidden_checks else {}}
        (spec_dir / "kernel.json").write_text(json.dumps(spec))


def private_folders(course_dir: Path) -> list[Path]:
    """The parts of a student's private course its kernel must not see (gradebook, source, kernelspecs)."""
    return [course_dir / "db", course_dir / "source", course_dir / "jupyter", course_dir / "submitted"]


def student_policy(setup: AssignmentSetup, uid: int, course_dir: Path) -> SandboxPolicy:
    """The cage of one student's code: its uid and home, what it must not see and what it must reach
    (its course folder and the course's code, wherever the instructor's checkout lives)."""
    reach = [str(course_dir)] + ([str(setup.code_root)] if setup.code_root else [])
    return replace(setup.policy, uid=uid, gid=uid, home=str(course_dir / "home"),
                   hidden_paths=list(setup.hidden_paths) + [str(p) for p in private_folders(course_dir)],
                   exposed_paths=[*setup.policy.exposed_paths, *reach])


def build_course(setup: AssignmentSetup, student: str, submission: dict[str, bytes], scratch: Path,
                 uid: int, attempt: int = 1) -> Path:
    """The private course tree of one student; only the autograded folder is reachable by the kernel.

    One folder per assignment and attempt: a student of two assignments is graded in two at once."""
    course_dir = scratch / f"course-{setup.assignment}-{student}" if attempt == 1 else \
        scratch / f"course-{setup.assignment}-{student}-attempt{attempt}"
    course_dir.mkdir(mode=0o700)
    if running_as_root():  # only this student's uid (as group) may traverse to its working folder
        os.chown(course_dir, 0, uid)
        os.chmod(course_dir, 0o710)
    else:
        os.chmod(course_dir, 0o711)
    private = private_folders(course_dir)
    shutil.copytree(setup.source_dir, course_dir / "source" / setup.assignment,
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    (course_dir / "db").mkdir()
    shutil.copyfile(setup.template_db, course_dir / "db" / "gradebook.db")
    target = course_dir / "submitted" / student / setup.assignment
    target.mkdir(parents=True)
    for name, content in submission.items():   # a path: the grader's spooled copy (class_files.spool)
        if isinstance(content, Path):
            shutil.copyfile(content, target / name)
        else:
            (target / name).write_bytes(content)
    policy = student_policy(setup, uid, course_dir)
    policy_file = course_dir / "jupyter" / "sandbox-policy.json"
    (course_dir / "jupyter").mkdir()
    policy_file.write_text(policy.to_json())
    _write_kernelspecs(course_dir / "jupyter", policy_file, setup.hidden_checks)
    (course_dir / "nbgrader_config.py").write_text(_config_text(setup, course_dir))
    for path in private:
        os.chmod(path, 0o700)
    return course_dir


def autograde(setup: AssignmentSetup, student: str, submission: dict[str, bytes], scratch: Path,
              uid: int) -> AutogradeRun:
    """Run `nbgrader autograde` for one student in its own course; never raises for a bad notebook.

    An attempt that failed for a reason outside the student's code (a kernel that could not start, a
    machine too busy: failures.machine_fault) is set aside and the submission graded once more, in a
    fresh course; the result's `regraded` says why.
    """
    start = time.perf_counter()
    result = _attempt(setup, student, submission, scratch, uid, 1)
    fault = failures.machine_fault(result.ok, result.log, result.autograded_dir(setup.assignment))
    if fault is not None:
        shutil.rmtree(result.course_dir, ignore_errors=True)
        result = replace(_attempt(setup, student, submission, scratch, uid, 2), regraded=fault)
    return replace(result, seconds=time.perf_counter() - start)


def _attempt(setup: AssignmentSetup, student: str, submission: dict[str, bytes], scratch: Path,
             uid: int, attempt: int) -> AutogradeRun:
    start = time.perf_counter()
    course_dir = build_course(setup, student, submission, scratch, uid, attempt)
    env = dict(os.environ, JUPYTER_PATH=str(course_dir / "jupyter"),
               JUPYTER_CONFIG_DIR=str(course_dir / "jupyter" / "config"), PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    env.update(course_lib_path())
    command = isolated([sys.executable, "-m", "nbgrader", "autograde", setup.assignment, "--student", student,
                        "--force", "--log-level=INFO"], keep=[course_dir, *setup.hidden_checks])
    command = under_memory_limit(command, NBGRADER_MEMORY_BYTES)
    with student_group(uid, setup.policy.student_memory_bytes):   # nbgrader, its kernel, ranks and /tmp
        ok, log = GRADING_SESSIONS.run(joined(command, uid), course_dir, env, setup.notebook_timeout, tag=uid,
                                       limit_name="the whole notebook's time limit")
        kill_processes_of_uid(uid)  # a kernel's detached children must not outlive the grading
    return AutogradeRun(student, ok, time.perf_counter() - start, course_dir, log[-20_000:])


def under_memory_limit(command: list[str], limit: int) -> list[str]:
    """command, exec'ed with a soft address-space limit (RLIMIT_AS) of ``limit`` bytes, which what it
    starts inherits; the hard limit stays, so the kernel nbgrader starts sets its own (the policy's)."""
    return [sys.executable, "-I", "-S", "-c", LIMIT_THEN_EXEC, str(limit), *command]


def course_lib_path() -> dict[str, str]:
    """PYTHONPATH for the grading processes when this environment's own course_lib is another checkout's
    (settings.code_root_for_fresh_pythons); nothing otherwise."""
    root = code_root_for_fresh_pythons()
    return {"PYTHONPATH": root} if root else {}


# Every grading subprocess still running, tagged with its sandbox uid: stop_all() ends them on Ctrl-C.
GRADING_SESSIONS = Sessions()


def run_tracked(command: list[str], cwd: Path, env: dict | None, timeout: float,
                uid: int | None = None, isolate=None, memory: int | None = None) -> tuple[bool, str]:
    """Run a grading subprocess in its own session; (succeeded, output). Killed after timeout.

    ``uid`` is the sandbox uid its student code runs under, if any: what is left of it is killed when the
    command ends, and stop_all() cleans up after it too. ``isolate``: run it in namespaces of its own
    (namespaces.isolated), with these folders of a private /tmp kept, and with ``memory`` bytes for it
    and all it starts together (memory_group.py).
    """
    with student_group(uid, memory if isolate is not None and uid is not None else None):
        if isolate is not None:
            command = joined(isolated(command, keep=isolate), uid)
        try:
            return GRADING_SESSIONS.run(command, cwd, env, timeout, tag=uid)
        finally:
            if uid is not None:
                kill_processes_of_uid(uid)


def stop_all() -> None:
    """End every grading subprocess and whatever student code they left (an interrupted run)."""
    for uid in GRADING_SESSIONS.kill_all():
        if uid is not None:
            kill_processes_of_uid(uid)
