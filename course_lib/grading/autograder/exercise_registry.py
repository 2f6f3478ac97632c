"""The registry of hidden checks collected from the exercises: (assignment, grade_id) -> IsolatedCheck.

Each hidden-check module (``chNN_<exercise>``) exports its ``EXERCISE`` and its ``ROWS``; this reads them,
a chapter's modules only when that chapter is first asked for (a judge imports no other chapter's checks).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from course_lib.grading.attempt.exercise import NAME, Exercise
from course_lib.grading.attempt.hidden_checks import instructor_checks
from course_lib.grading.autograder.judge import IsolatedCheck


def exercise_rows(module) -> dict[tuple[str, str], IsolatedCheck]:
    """One hidden-check module's rows, checked against its Exercise: a row per part that has points."""
    name = module.__name__.rpartition(".")[2]
    exercise, rows = getattr(module, "EXERCISE", None), getattr(module, "ROWS", None)
    if not isinstance(exercise, Exercise) or not isinstance(rows, dict):
        raise TypeError(f"hidden checks {name!r} export no EXERCISE (an Exercise) and ROWS (grade_id -> "
                        "(check, answer names)): add them at the end of the module, as every chNN_ has")
    if exercise.name != name or set(rows) != set(exercise.points):
        raise ValueError(f"hidden checks {name!r}: EXERCISE is named {exercise.name!r} and ROWS lists "
                         f"{sorted(rows)} while its points are for {sorted(exercise.points)}: the module's "
                         "name and the exercise's, and the parts with points and with rows, must be the same")
    table = {}
    for grade_id, (check, answers) in rows.items():
        unknown = set(answers) - set(exercise.answers)
        if unknown:
            raise ValueError(f"hidden checks {name!r}: row {grade_id!r} gives the check {sorted(unknown)}, "
                             f"which are not among the exercise's answers {exercise.answers}")
        table[(exercise.chapter, grade_id)] = IsolatedCheck(f"{name}:{check.__name__}", tuple(answers))
    return table


class ExerciseRegistry(Mapping):
    """(assignment, grade_id) -> IsolatedCheck for the named exercises, each read on first need."""

    def __init__(self, names):
        bad = [name for name in names if not NAME.fullmatch(name)]
        if bad:
            raise ValueError(f"exercise names {bad} are not chNN_<exercise>: list the hidden-check modules "
                             "by their module names, e.g. 'ch02_ring'")
        self.names = tuple(names)
        self._rows: dict[tuple[str, str], IsolatedCheck] = {}
        self._read: set[str] = set()

    def _read_chapter(self, number: str | None) -> None:
        for name in self.names:
            if name not in self._read and (number is None or name[2:4] == number):
                self._rows.update(exercise_rows(instructor_checks(name)))
                self._read.add(name)

    def __getitem__(self, key: tuple[str, str]) -> IsolatedCheck:
        assignment, _ = key
        self._read_chapter(assignment[:2])
        return self._rows[key]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        self._read_chapter(None)
        return iter(dict(self._rows))

    def __len__(self) -> int:
        self._read_chapter(None)
        return len(self._rows)

    def exercises(self) -> list[Exercise]:
        """Every exercise's record, in the order the registry names them."""
        return [instructor_checks(name).EXERCISE for name in self.names]
