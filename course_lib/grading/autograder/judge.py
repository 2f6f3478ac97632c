"""The isolated judge: re-runs each registered hidden check on a submission, outside its kernel.

Run as ``python -I`` (no user site, no PYTHONPATH, no cwd on sys.path) by `run_judge`. The judge
process itself never executes student code: checks receive `StudentFunction`s built from the
submitted sources, which resolve only inside forked children that enter the sandbox first.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from course_lib.grading.attempt.refusals import LESSON_IMPORTS
from course_lib.grading.sandbox.policy import POLICY_ENV, SandboxPolicy
from course_lib.grading.sandbox.worker import run_tracked
from course_lib.grading.settings import HIDDEN_CHECKS_ENV, code_root_for_fresh_pythons


@dataclass(frozen=True)
class IsolatedCheck:
    """One hidden test cell re-checked in isolation: ``module:function`` and the names it is given."""

    check: str                               # "module:function" among the hidden checks, e.g.
                                             # "ch02_ring:check_ring_all_reduce_hidden"
    functions: tuple[str, ...]               # student function names, passed positionally
    context_cells: tuple[str, ...] = ()      # grade_ids of instructor cells the solution relies on
    kwargs: dict = field(default_factory=dict)


@dataclass
class Verdict:
    passed: bool
    message: str = ""


def load_registry(path: Path) -> dict[tuple[str, str], IsolatedCheck]:
    """The CHECKS of the registry file at ``path``: (assignment, test grade_id) -> IsolatedCheck."""
    spec = importlib.util.spec_from_file_location(f"course_registry_{abs(hash(str(path)))}", path)
    if spec is None or not Path(path).is_file():
        raise FileNotFoundError(f"no registry of hidden checks at {path} (nbgrader_config.py's "
                                "c.CourseGrading.registry names it)")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CHECKS


def _run_check(entry: IsolatedCheck, sources: list[str], prelude: str):
    from course_lib.grading.attempt.hidden_checks import resolve_check
    from course_lib.grading.attempt.student_function import StudentFunction

    check = resolve_check(entry.check)
    students = [StudentFunction(name=name, sources=tuple(sources), prelude=prelude)
                for name in entry.functions]
    check(*students, **entry.kwargs)


def judge_main(request_file: str, result_file: str) -> None:
    request = json.loads(Path(request_file).read_text())
    os.environ[HIDDEN_CHECKS_ENV] = os.pathsep.join(request["hidden_checks"])
    registry = load_registry(Path(request["registry"]))
    prelude = request.get("prelude", "")
    # the lesson's imports, once here: every child forked for a check then finds them already imported
    exec(compile(prelude, LESSON_IMPORTS, "exec"), {"__name__": "lesson_imports"})
    os.environ[POLICY_ENV] = request["policy"]  # children of this process cage themselves with it
    verdicts = {}
    for grade_id in request["grade_ids"]:
        entry = registry[(request["assignment"], grade_id)]
        try:
            _run_check(entry, request["sources"][grade_id], prelude)
            verdicts[grade_id] = {"passed": True, "message": ""}
        except Exception as error:
            message = "".join(traceback.format_exception_only(type(error), error)).strip()
            verdicts[grade_id] = {"passed": False, "message": message[-3000:]}
    Path(result_file).write_text(json.dumps(verdicts))


# course_lib comes from the environment's install (-I keeps the working folder and PYTHONPATH off
# sys.path), or from the checkout this grader runs from when the environment was installed for another
# (argv[3]: settings.code_root_for_fresh_pythons); the hidden checks and the registry are loaded from the
# paths the request names.
BOOTSTRAP = ("import sys; sys.argv[3] and sys.path.insert(0, sys.argv[3]); "
             "from course_lib.grading.autograder.judge import judge_main; "
             "judge_main(sys.argv[1], sys.argv[2])")


def run_judge(registry: Path, hidden_checks, assignment: str,
              sources: dict[str, list[str]], policy: SandboxPolicy, scratch: Path,
              timeout: float, prelude: str = "") -> dict[str, Verdict]:
    """Verdicts per test grade_id; a judge that crashes or hangs fails every check it had not written."""
    if not sources:
        return {}
    request = scratch / "judge-request.json"
    result = scratch / "judge-result.json"
    request.write_text(json.dumps({"registry": str(registry),
                                   "hidden_checks": [str(folder) for folder in hidden_checks],
                                   "assignment": assignment, "sources": sources, "prelude": prelude,
                                   "grade_ids": sorted(sources), "policy": policy.to_json()}))
    os.chmod(request, 0o600)
    command = [sys.executable, "-I", "-c", BOOTSTRAP, str(request), str(result),
               code_root_for_fresh_pythons() or ""]
    _, output = run_tracked(command, scratch, None, timeout, policy.uid,
                            isolate=[scratch, registry, *hidden_checks])
    failure = f"the isolated re-check failed: {output.strip()[-1500:]}"
    if result.exists():
        return {k: Verdict(**v) for k, v in json.loads(result.read_text()).items()}
    return {grade_id: Verdict(False, failure) for grade_id in sources}


def isolated_sources(notebook, release, assignment: str, registry: dict) -> dict[str, list[str]]:
    """For each registered test cell of this notebook: the definitions its check runs against."""
    from course_lib.grading.attempt.isolation import solution_sources
    from course_lib.notebook_cells import marks

    release_cells = {marks(c).get("grade_id"): c.source for c in release.cells}
    wanted = {}
    for cell in release.cells:
        grade_id = marks(cell).get("grade_id")
        entry = registry.get((assignment, grade_id))
        if entry is None:
            continue
        context = {cid: release_cells.get(cid, "") for cid in entry.context_cells}
        wanted[grade_id] = solution_sources(notebook, context)
    return wanted


if __name__ == "__main__":
    judge_main(sys.argv[1], sys.argv[2])
