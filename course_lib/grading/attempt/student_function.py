"""A student's function, resolvable inside whichever process runs it.

In a notebook the function object itself is passed (fork carries it to the ranks). When grading in
isolation, only the source of the student's solution cells is passed and each rank process executes
it for itself, so the process that judges the results never runs student code.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from course_lib.grading.sandbox.policy import enter_inherited_policy

# What every exercise cell may assume without importing it: the lesson's own opening imports.
STUDENT_PRELUDE = "import math\nimport torch\nimport torch.distributed as dist\n"


@dataclass
class StudentFunction:
    """Either ``function`` (in-kernel) or ``sources`` + ``name`` (isolated grading)."""

    name: str
    function: Callable | None = None
    sources: Sequence[str] = field(default_factory=tuple)

    def source_text(self) -> str:
        """The code the student wrote for this function: the answer cells, or the function's own source."""
        if self.sources:
            return "\n".join(self.sources)
        try:
            return inspect.getsource(self.function)
        except (OSError, TypeError):
            return ""

    def resolve(self) -> Callable:
        """The callable; with sources, executes them here (call this inside the rank process)."""
        if self.function is not None:
            return self.function
        # Under the isolated judge this process is a forked child: cage it before any student code.
        enter_inherited_policy()
        namespace: dict = {"__name__": "student_submission"}
        exec(compile(STUDENT_PRELUDE + "\n\n".join(self.sources), "<student cells>", "exec"), namespace)
        if not callable(namespace.get(self.name)):
            raise NameError(f"the submission does not define a function named {self.name!r}")
        return namespace[self.name]


def as_student_function(candidate, name: str | None = None) -> StudentFunction:
    """Accept a plain function (visible tests, in a notebook) or an already-built StudentFunction."""
    if isinstance(candidate, StudentFunction):
        return candidate
    if not callable(candidate):
        raise TypeError(f"expected the function you wrote, got {type(candidate).__name__}: "
                        "pass the function itself, e.g. check(ring_all_reduce), without calling it")
    return StudentFunction(name=name or candidate.__name__, function=candidate)
