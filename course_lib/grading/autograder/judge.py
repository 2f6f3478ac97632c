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
import tempfile
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from course_lib.grading.attempt.refusals import LESSON_IMPORTS
from course_lib.grading.sandbox.policy import POLICY_ENV, SandboxPolicy
from course_lib.grading.sandbox.worker import run_tracked
from course_lib.grading.settings import HIDDEN_CHECKS_ENV, code_root_for_fresh_pythons
from course_lib.grading.student_text import readable


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
    message: str = ""   # the check's words, which may quote the student's (read with student_text)
    hung: bool = False  # the judge's own launcher stopped ranks that did not finish within their timeout
    stderr: str = ""    # what the check's run printed on stderr (warnings, the ranks' too), bounded


MAX_RESULT_BYTES = 4 * 1024**2   # the judge's verdicts; more is a judge the student's code has broken
MAX_MESSAGE_CHARS = 3000
MAX_STDERR_CHARS = 4000
HANGS_SEEN: list[float] = []     # in the judge process: each time its own launcher found ranks hung


def _count_hangs() -> None:
    """In the judge: note every hang the launcher itself measured (its timeout ran out), so that a
    deadlock note rests on the grader's evidence, never on an error name or text the student chose."""
    from course_lib.real.launch import runner

    measured = runner._hung

    def hung(ranks, timeout):
        HANGS_SEEN.append(timeout)
        return measured(ranks, timeout)

    runner._hung = hung


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


@contextmanager
def _stderr_kept(kept: list[str]):
    """While the block runs, file descriptor 2 and sys.stderr (this process's warnings, and whatever its
    forked ranks and their relays write there) go to a file; its first MAX_STDERR_CHARS characters land in
    ``kept``."""
    sys.stderr.flush()
    saved, python_stderr = os.dup(2), sys.stderr
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        sys.stderr = open(2, "w", buffering=1, errors="backslashreplace", closefd=False)  # noqa: SIM115
        try:
            yield
        finally:
            sys.stderr.close()
            sys.stderr = python_stderr
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            kept.append(readable(capture.read(4 * MAX_STDERR_CHARS), MAX_STDERR_CHARS))


def judge_main(request_file: str, result_file: str) -> None:
    request = json.loads(Path(request_file).read_text())
    os.environ[HIDDEN_CHECKS_ENV] = os.pathsep.join(request["hidden_checks"])
    registry = load_registry(Path(request["registry"]))
    prelude = request.get("prelude", "")
    # the lesson's imports, once here: every child forked for a check then finds them already imported
    exec(compile(prelude, LESSON_IMPORTS, "exec"), {"__name__": "lesson_imports"})
    os.environ[POLICY_ENV] = request["policy"]  # children of this process cage themselves with it
    _count_hangs()
    verdicts = {}
    for grade_id in request["grade_ids"]:
        entry = registry[(request["assignment"], grade_id)]
        hangs_before, stderr = len(HANGS_SEEN), []
        try:
            with _stderr_kept(stderr):
                _run_check(entry, request["sources"][grade_id], prelude)
            verdicts[grade_id] = {"passed": True, "message": "", "stderr": "".join(stderr)}
        except Exception as error:
            message = readable("".join(traceback.format_exception_only(type(error), error)).strip(), None)
            verdicts[grade_id] = {"passed": False, "message": message[-MAX_MESSAGE_CHARS:],
                                  "hung": len(HANGS_SEEN) > hangs_before, "stderr": "".join(stderr)}
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
                            isolate=[scratch, registry, *hidden_checks], memory=policy.student_memory_bytes)
    failure = f"the isolated re-check failed: {readable(output.strip()[-1500:])}"
    if result.exists():
        return read_verdicts(result, list(sources), failure)
    return {grade_id: Verdict(False, failure) for grade_id in sources}


def read_verdicts(path: Path, grade_ids: list[str], failure: str) -> dict[str, Verdict]:
    """The judge's result file, taken as data only: for each cell asked about, a verdict of the expected
    shape (its message readable and bounded), else a failure; anything else in the file is ignored."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_RESULT_BYTES + 1)
        found = json.loads(raw.decode("utf-8", "replace")) if len(raw) <= MAX_RESULT_BYTES else None
    except (OSError, ValueError):
        found = None
    verdicts = {}
    for grade_id in grade_ids:
        entry = found.get(grade_id) if isinstance(found, dict) else None
        if not isinstance(entry, dict) or not isinstance(entry.get("passed"), bool):
            verdicts[grade_id] = Verdict(False, failure if found is None else
                                         "the isolated re-check gave no verdict for this cell")
            continue
        message = readable(entry.get("message", ""), MAX_MESSAGE_CHARS)
        stderr = entry.get("stderr", "")
        verdicts[grade_id] = Verdict(entry["passed"], message, entry.get("hung") is True,
                                     readable(stderr if isinstance(stderr, str) else "", MAX_STDERR_CHARS))
    return verdicts


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
