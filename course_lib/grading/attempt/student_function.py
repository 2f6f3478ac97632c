"""A student's function, resolvable inside whichever process runs it, under its exercise's refusal.

In a notebook the function object itself is passed (fork carries it to the ranks); in the child it is made
again from its notebook cells, as the grader will make it. When grading in isolation, only the source of
the student's answer cells is passed (with the lesson's own import lines) and each child executes it for
itself, so the process that judges the results never runs student code. Either way, the child arms the
exercise's ``Refusal`` before any student code runs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from course_lib.grading.attempt import kernel_cells, refusals
from course_lib.grading.attempt.hidden_checks import hidden_check_folders
from course_lib.grading.sandbox.policy import enter_inherited_policy
from course_lib.real.plumbing.processes import in_forked_child

# What every exercise cell may assume without importing it, in any chapter.
STUDENT_PRELUDE = "import math\nimport torch\nimport torch.distributed as dist\n"


@dataclass
class StudentFunction:
    """Either ``function`` (in-kernel) or ``sources`` + ``name`` (isolated grading)."""

    name: str
    function: Callable | None = None
    sources: Sequence[str] = field(default_factory=tuple)
    refusal: refusals.Refusal | None = None    # None: course_lib only, as every exercise refuses
    prelude: str = ""                          # the lesson's own import lines (isolated grading)

    def source_text(self) -> str:
        """The code the student wrote for this function: the answer cells, or the function's own source."""
        if self.sources:
            return "\n".join(self.sources)
        try:
            return inspect.getsource(self.function)
        except (OSError, TypeError):
            return ""

    def resolve(self) -> Callable:
        """The callable, made in this process; in a child forked to run it, under the refusal."""
        if self.function is not None:
            if not in_forked_child():
                return self.function
            self._arm()
            answer = kernel_cells.redefined(self.function, self.name, refusals.watch_namespace)
        else:
            # Under the isolated judge this process is a forked child: cage it before any student code.
            enter_inherited_policy()
            self._arm()
            answer = self._from_sources()
        refused = refusals.refused_object(answer)
        if refused:
            raise refusals.RefusedCodeError(refused)
        return answer

    def identity(self) -> tuple:
        """What makes two calls grade the same code (a check that caches its runs keys them by it): the
        sources, or the function and the helpers its code names (redefining one helper starts afresh)."""
        if self.function is None:
            return ("sources", self.name, tuple(self.sources))
        code = getattr(self.function, "__code__", None)
        used = getattr(self.function, "__globals__", {})
        names = code.co_names if code else ()
        helpers = tuple((name, id(used[name])) for name in names if callable(used.get(name)))
        return ("function", id(self.function), helpers)

    def _arm(self) -> None:
        refusals.arm(self.refusal, hidden_check_folders())

    def prepare(self) -> StudentFunction:
        """Work out the refusal here, in the process about to fork the children that run this answer."""
        refusals.prepare(self.refusal, hidden_check_folders())
        return self

    def _from_sources(self) -> Callable:
        namespace: dict = {"__name__": "student_submission"}
        refusals.watch_namespace(namespace)
        exec(compile(STUDENT_PRELUDE + self.prelude, refusals.LESSON_IMPORTS, "exec"), namespace)
        # Cell by cell, as the notebook ran them: a cell that fails (an import the exercise refuses, say)
        # costs the answers it defines, never another exercise's answer in a cell of its own.
        failures = []
        for source in self.sources:
            mark = refusals.refusals_so_far()
            try:
                exec(compile(source, "<student cells>", "exec"), namespace)
            except Exception as error:
                refusals.forget_refusals_since(mark)
                failures.append((self.name in source, error))
        if not callable(namespace.get(self.name)):
            if failures:  # the error of the cell that names the answer, else the first cell's
                raise max(failures, key=lambda failure: failure[0])[1]
            raise NameError(f"the submission does not define a function named {self.name!r}")
        return namespace[self.name]


def as_student_function(candidate, name: str | None = None,
                        refusal: refusals.Refusal | None = None) -> StudentFunction:
    """Accept a plain function (visible tests, in a notebook) or an already-built StudentFunction; the
    exercise's ``refusal`` goes with it."""
    if isinstance(candidate, StudentFunction):
        student = replace(candidate, refusal=refusal) if refusal is not None else candidate
    elif not callable(candidate):
        raise TypeError(f"expected the function you wrote, got {type(candidate).__name__}: "
                        "pass the function itself, e.g. check(ring_all_reduce), without calling it")
    else:
        student = StudentFunction(name=name or candidate.__name__, function=candidate, refusal=refusal)
    return student if in_forked_child() else student.prepare()
