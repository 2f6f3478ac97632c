"""The isolated judge: re-runs each registered hidden check on a submission, outside its kernel.

Run as ``python -I`` (no user site, no PYTHONPATH, no cwd on sys.path) by `run_judge`. The judge
process itself never executes student code: checks receive `StudentFunction`s built from the
submitted sources, which resolve only inside forked children that enter the sandbox first.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from course_lib.grading.sandbox import POLICY_ENV, SandboxPolicy
from course_lib.grading.worker import run_tracked


@dataclass(frozen=True)
class IsolatedCheck:
    """One hidden test cell re-checked in isolation: ``module:function`` and the names it is given."""

    check: str                               # e.g. "autograde_tests.checks.ch02_ring:check_ring"
    functions: tuple[str, ...]               # student function names, passed positionally
    context_cells: tuple[str, ...] = ()      # grade_ids of instructor cells the solution relies on
    kwargs: dict = field(default_factory=dict)


@dataclass
class Verdict:
    passed: bool
    message: str = ""


def load_registry(spec: str) -> dict[tuple[str, str], IsolatedCheck]:
    """``package.module`` whose CHECKS maps (assignment, test grade_id) -> IsolatedCheck."""
    code_root = str(Path(__file__).resolve().parents[2])  # autograde_tests lives next to course_lib
    if code_root not in sys.path:
        sys.path.append(code_root)
    return importlib.import_module(spec).CHECKS


def _run_check(entry: IsolatedCheck, sources: list[str]):
    from course_lib.grading.student_function import StudentFunction

    module_name, function_name = entry.check.split(":")
    check = getattr(importlib.import_module(module_name), function_name)
    students = [StudentFunction(name=name, sources=tuple(sources)) for name in entry.functions]
    check(*students, **entry.kwargs)


def judge_main(request_file: str, result_file: str) -> None:
    request = json.loads(Path(request_file).read_text())
    registry = load_registry(request["registry"])
    os.environ[POLICY_ENV] = request["policy"]  # children of this process cage themselves with it
    verdicts = {}
    for grade_id in request["grade_ids"]:
        entry = registry[(request["assignment"], grade_id)]
        try:
            _run_check(entry, request["sources"][grade_id])
            verdicts[grade_id] = {"passed": True, "message": ""}
        except Exception as error:
            message = "".join(traceback.format_exception_only(type(error), error)).strip()
            verdicts[grade_id] = {"passed": False, "message": message[-3000:]}
    Path(result_file).write_text(json.dumps(verdicts))


BOOTSTRAP = ("import sys; sys.path.insert(0, sys.argv[1]); "
             "from course_lib.grading.judge import judge_main; judge_main(sys.argv[2], sys.argv[3])")


def run_judge(course_root: Path, registry: str, assignment: str, sources: dict[str, list[str]],
              policy: SandboxPolicy, scratch: Path, timeout: float) -> dict[str, Verdict]:
    """Verdicts per test grade_id; a judge that crashes or hangs fails every check it had not written."""
    if not sources:
        return {}
    request = scratch / "judge-request.json"
    result = scratch / "judge-result.json"
    request.write_text(json.dumps({"registry": registry, "assignment": assignment, "sources": sources,
                                   "grade_ids": sorted(sources), "policy": policy.to_json()}))
    os.chmod(request, 0o600)
    command = [sys.executable, "-I", "-c", BOOTSTRAP, str(course_root), str(request), str(result)]
    _, output = run_tracked(command, scratch, None, timeout, policy.uid)
    failure = f"the isolated re-check failed: {output.strip()[-1500:]}"
    if result.exists():
        return {k: Verdict(**v) for k, v in json.loads(result.read_text()).items()}
    return {grade_id: Verdict(False, failure) for grade_id in sources}


def isolated_sources(notebook, release, assignment: str, registry: dict) -> dict[str, list[str]]:
    """For each registered test cell of this notebook: the definitions its check runs against."""
    from course_lib.grading.isolation import solution_sources

    release_cells = {(c.metadata.get("nbgrader") or {}).get("grade_id"): c.source for c in release.cells}
    wanted = {}
    for cell in release.cells:
        grade_id = (cell.metadata.get("nbgrader") or {}).get("grade_id")
        entry = registry.get((assignment, grade_id))
        if entry is None:
            continue
        context = {cid: release_cells.get(cid, "") for cid in entry.context_cells}
        wanted[grade_id] = solution_sources(notebook, context)
    return wanted


if __name__ == "__main__":
    judge_main(sys.argv[1], sys.argv[2])
