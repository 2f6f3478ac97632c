"""Checks `make grade` makes before grading anyone: can the sandbox's uid run the course's Python, and
does the reference solution score full marks in the sandbox? Either failing stops the run, saying why.
"""

from __future__ import annotations

import os
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook

from course_lib.grading.autograder import fixtures, gradebook_merge, submissions
from course_lib.grading.sandbox.failures import nbgrader_error
from course_lib.grading.sandbox.namespaces import IsolationUnavailable, check_isolation
from course_lib.grading.sandbox.policy import running_as_root
from course_lib.grading.sandbox.worker import AssignmentSetup, course_lib_path, run_tracked, student_policy
from course_lib.grading.settings import CODE_ROOT

# What a grading kernel and the isolated judge import first; a sandbox that cannot import them grades 0.
REACH_PROBE = "import torch, ipykernel, nbformat, course_lib.real, course_lib.grading.sandbox.kernel"
REFERENCE_STUDENT = "reference-solution"


class GradingRefused(SystemExit):
    """The class would be graded unfairly (or not at all): nobody was graded."""


def check_sandbox_reach(setup: AssignmentSetup, scratch: Path, uid: int) -> None:
    """As root: start Python inside the student sandbox and import what grading needs, or refuse."""
    if not running_as_root():
        return
    try:
        check_isolation()
    except IsolationUnavailable as error:
        raise GradingRefused(str(error)) from None
    probe_dir = scratch / "reach-probe"
    (probe_dir / "home").mkdir(parents=True)
    os.chown(probe_dir / "home", uid, uid)
    os.chmod(probe_dir, 0o755)
    policy = student_policy(setup, uid, probe_dir)
    code_root = setup.code_root or CODE_ROOT
    # the hidden test cells load the instructor's checks in the kernel: its uid must read their folders
    probe = REACH_PROBE + f"\nimport os\nfor folder in {list(setup.hidden_checks)!r}: os.listdir(folder)"
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **course_lib_path())
    command = [sys.executable, "-m", "course_lib.grading.sandbox.policy", policy.to_json(), probe]
    ok, output = run_tracked(command, probe_dir / "home", env, timeout=300,
                             isolate=[probe_dir, *setup.hidden_checks])
    shutil.rmtree(probe_dir, ignore_errors=True)
    if not ok:
        raise GradingRefused(_reach_message(uid, output.strip()[-1200:], code_root, setup.hidden_checks))


def _closed_to_others(roots: list[Path], limit: int = 5) -> list[str]:
    """Up to `limit` paths under roots that another user cannot read (files) or list and enter (folders)."""
    closed = []
    for root in roots:
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d not in (".git", "grading", "solutions", "__pycache__")]
            for path, need in [(folder, 0o005)] + [(os.path.join(folder, f), 0o004) for f in files]:
                try:
                    if os.stat(path).st_mode & need != need:
                        closed.append(path)
                except OSError:
                    continue
                if len(closed) >= limit:
                    return closed
    return closed


def _reach_message(uid: int, error: str, code_root: Path, hidden_checks=()) -> str:
    folders = [Path(folder) for folder in hidden_checks]
    needed = [code_root / "course_lib", *folders, Path(sys.prefix), Path(sys.base_prefix)]
    closed = _closed_to_others([p for p in needed if p.is_dir()])
    if not os.stat(code_root).st_mode & 0o001:
        closed.insert(0, str(code_root))
    listing = "".join(f"\n    {path}" for path in closed) or "\n    (none found: see the error above)"
    return (f"make grade stopped before grading anyone: student code runs as the unprivileged uid {uid}, "
            f"which cannot start this course's Python:\n  {error}\n"
            f"Not readable by other users (the first few):{listing}\n"
            f"Fix: make the course's code and its environment readable by others, e.g.\n"
            f"    chmod o+rx {code_root} && chmod -R o+rX {code_root / 'course_lib'} "
            f"{' '.join(str(f) for f in folders)} {sys.prefix}\n"
            f"or clone the course into a folder others can read (e.g. /srv/course) and run `make setup` "
            f"there. Folders above the checkout may stay private: the sandbox reaches the checkout through "
            f"them; solutions/ and grading/ stay hidden from student code either way.")


def reference_submission(source_dir: Path, shape: submissions.AssignmentShape) -> submissions.Submission:
    """The release with every solution cell answered by the instructor's own code."""
    files = {}
    for name, release in shape.release_notebooks.items():
        source = nbformat.read(source_dir / f"{name}.ipynb", as_version=4)
        wanted = set(fixtures.solution_ids(release))
        answers = {k: v for k, v in fixtures.solution_sources(source).items() if k in wanted}
        files[f"{name}.ipynb"] = nbformat.writes(fixtures.make_submission(release, answers)).encode()
    return submissions.Submission(REFERENCE_STUDENT, shape.name, files)


def _cell_maxima(template_db: Path, assignment: str) -> dict[tuple[str, str], float]:
    with Gradebook(f"sqlite:///{template_db}") as gb:
        found = gb.find_assignment(assignment)
        return {(nb.name, cell.name): float(cell.max_score)
                for nb in found.notebooks for cell in nb.grade_cells}


def _cell_error(notebook, grade_id: str) -> str:
    for cell in notebook.cells if notebook is not None else []:
        if (cell.metadata.get("nbgrader") or {}).get("grade_id") == grade_id:
            errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
            return f"{errors[-1].get('ename')}: {str(errors[-1].get('evalue'))[:300]}" if errors else ""
    return ""


def reference_shortfalls(setup: AssignmentSetup, outcome) -> list[str]:
    """Why the reference solution's graded outcome is not full marks (empty when it is)."""
    db_url = f"sqlite:///{outcome.run_dir / 'db' / 'gradebook.db'}"
    scores = gradebook_merge.read_autograded_scores(db_url, setup.assignment, REFERENCE_STUDENT)
    problems = []
    for (name, grade_id), top in sorted(_cell_maxima(setup.template_db, setup.assignment).items()):
        auto_score, manual = scores.get((name, grade_id), (0.0, False))
        verdict = outcome.verdicts.get(name, {}).get(grade_id)
        if verdict is not None and not verdict.passed:
            problems.append(f"{name}/{grade_id}: the isolated re-check failed: {verdict.message[:300]}")
        elif auto_score is None and manual:
            continue  # graded by hand: no automatic score to reach
        elif float(auto_score or 0) < top:
            why = _cell_error(outcome.notebooks.get(name), grade_id) or "no error shown"
            problems.append(f"{name}/{grade_id}: {float(auto_score or 0):g}/{top:g} ({why})")
    if problems and not outcome.notebooks:
        problems.append(f"nbgrader could not grade it: {nbgrader_error(outcome.log)}")
    if problems and outcome.regraded:
        problems.append(f"(graded twice: the first attempt failed outside the notebook: {outcome.regraded})")
    return problems


def check_references(run, setups: list[tuple[AssignmentSetup, submissions.AssignmentShape]],
                     grade_one, first_uid: int) -> None:
    """Grade each assignment's reference solution (in parallel); refuse the run unless all are full marks.

    grade_one(setup, shape, submission, uid) -> the pipeline's Outcome, graded exactly as a student's.
    """
    def attempt(index_and_setup):
        index, (setup, shape) = index_and_setup
        outcome = grade_one(setup, shape, reference_submission(setup.source_dir, shape), first_uid + index)
        try:
            return setup.assignment, reference_shortfalls(setup, outcome), outcome.seconds
        finally:
            shutil.rmtree(outcome.run_dir, ignore_errors=True)

    with ThreadPoolExecutor(max_workers=max(1, run.jobs)) as pool:
        checked = list(pool.map(attempt, enumerate(setups)))
    failed = []
    for assignment, problems, seconds in checked:
        run.say(f"{assignment}: the reference solution scores full marks in the sandbox ({seconds:.0f} s)"
                if not problems else f"{assignment}: the reference solution does NOT score full marks")
        failed += [f"  {assignment}: {problem}" for problem in problems]
    if failed:
        raise GradingRefused(
            "make grade stopped before grading anyone: the reference solution (solutions/, graded as a "
            "student in the same sandbox) does not score full marks, so every student would be graded "
            "unfairly:\n" + "\n".join(failed) + "\nFix the solution notebook or the grading environment "
            "(a missing package, a time limit too short for this machine: --cell-timeout), then grade again.")
