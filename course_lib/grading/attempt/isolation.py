"""Running a student's function where it cannot touch the judge: source extraction and forked calls.

`solution_sources` pulls the definitions out of a submitted notebook's solution cells; `map_isolated`
runs the function in a forked, sandboxed child and brings back only plain data (tensors, numbers,
containers) through torch's weights-only loader, so a hostile result cannot run code in the judge.
"""

from __future__ import annotations

import traceback

from course_lib.grading.attempt.refusals import Refusal, check_not_refused
from course_lib.grading.attempt.student_function import StudentFunction, as_student_function
from course_lib.grading.student_text import readable
from course_lib.notebook_cells import definitions_only, marks
from course_lib.real.plumbing.plain import decode, encode
from course_lib.real.plumbing.processes import ChildLimitError, call_in_fresh_child

MAX_RESULT_BYTES = 256 * 1024**2


class IsolatedCallError(RuntimeError):
    """The student's function raised, died or hung in its isolated child process."""


def solution_sources(notebook, context_cells: dict[str, str] | None = None) -> list[str]:
    """Definitions from every solution cell of a submitted notebook, in order.

    context_cells maps grade_id -> source of instructor cells (taken from the release, never from the
    submission) that the solution may rely on; they are placed where the notebook has them.
    """
    context_cells = dict(context_cells or {})
    sources = []
    for cell in notebook.get("cells", []):
        meta = marks(cell)
        if cell.get("cell_type") != "code":
            continue
        if meta.get("grade_id") in context_cells:
            sources.append(definitions_only(context_cells.pop(meta["grade_id"])))
        elif meta.get("solution"):
            sources.append(definitions_only(cell.get("source", "")))
    return [definitions_only(text) for text in context_cells.values()] + sources


def _call_all(student: StudentFunction, calls, keep) -> bytes:
    """Runs in the fresh child: the encoded outcome of every call, or of the first failure."""
    import torch

    # OpenMP's thread pool inherited through fork hangs the first parallel kernel that reuses it;
    # one thread never touches that pool (run_ranks' ranks do the same).
    torch.set_num_threads(1)
    try:
        function = student.resolve()
        outcome = {"ok": True, "value": [keep(args, function(*args)) for args in calls]}
        check_not_refused()
        try:
            return encode(outcome)
        except Exception as error:
            return encode({"ok": False, "error": f"the function returned something that is not plain "
                                                 f"data (numbers, tensors, lists, dicts): {error}"})
    except BaseException as error:  # noqa: B036  (SystemExit included: it is the student's failure)
        # readable: an error text holding a lone surrogate made the encoding fail, so the check reported
        # an UnicodeEncodeError instead of the student's own error
        text = readable("".join(traceback.format_exception_only(type(error), error)).strip())
        return encode({"ok": False, "error": text, "traceback": readable(traceback.format_exc()[-4000:])})


def _result(args, result):
    return result


def map_isolated(candidate, calls, name: str | None = None, timeout: float = 60.0,
                 refusal: Refusal | None = None, keep=_result) -> list:
    """The student's function called on each argument tuple in calls; results in order.

    The function is resolved and called in one forked child (sandboxed under the judge), under its
    exercise's refusal, whether it is a notebook's function or built from submitted sources. Raises
    IsolatedCallError with the student's error text when the function raised, met a refusal, died, hung
    or returned something not plain data. ``keep(args, result)`` (the check's own code, run in the child
    after each call) chooses what comes back, e.g. the arguments too, to see what the call changed.
    """
    student = as_student_function(candidate, name, refusal)
    calls = [tuple(args) for args in calls]
    try:
        payload = call_in_fresh_child(lambda: _call_all(student, calls, keep), timeout, MAX_RESULT_BYTES)
    except ChildLimitError as error:
        raise IsolatedCallError(str(error)) from None
    if not payload:
        raise IsolatedCallError("the process running the function died before returning (os._exit, "
                                "a crash or the memory limit)")
    try:
        outcome = decode(payload)
    except Exception as error:
        raise IsolatedCallError(f"returned data the grader refuses to load: {error}") from None
    if not isinstance(outcome, dict) or "ok" not in outcome:
        raise IsolatedCallError("returned data the grader does not understand")
    if not outcome["ok"]:
        raise IsolatedCallError(readable(outcome.get("error")))
    if not isinstance(outcome.get("value"), list) or len(outcome["value"]) != len(calls):
        raise IsolatedCallError("returned data the grader does not understand")
    return outcome["value"]

