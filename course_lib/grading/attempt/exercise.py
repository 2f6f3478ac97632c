"""The graded exercise as one record: its name, chapter, answer names, refusal and points per part.

Each exercise's hidden-check module (found through the course's grading settings) fills one; its registry
rows, its fixture folder and its folder of checks in course_lib (grading/checks/chNN_<exercise>/) are all
found from it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from course_lib.grading.attempt.refused_code import Refusal

NAME = re.compile(r"ch(\d\d)_[a-z0-9_]+")
# The files every exercise folder holds; ranks.py only where the exercise runs on ranks.
FIXED_FILES = ("visible.py", "judge.py")
RANKS_FILE = "ranks.py"


@dataclass(frozen=True)
class Exercise:
    """One graded exercise, as the registry, the judge and the completeness test read it."""

    name: str                       # "ch02_ring": its folder in grading/checks/, its hidden-check module
    chapter: str                    # "02_collectives": the solutions/ folder and nbgrader assignment
    answers: tuple[str, ...]        # the names the student's answer cells define
    points: Mapping[str, int]       # grade_id -> points, each part graded on its own (written only here)
    fixtures: str                   # its folder of wrong submissions, with their expected_scores.json
    refusals: tuple[Refusal, ...]   # what the answer may not run beyond all of course_lib (one per part
                                    # that has its own)
    on_ranks: bool = True           # whether its checks run the answer on real ranks (then it has ranks.py)

    def __post_init__(self):
        match = NAME.fullmatch(self.name)
        if match is None:
            raise ValueError(f"exercise name {self.name!r} is not chNN_<exercise> (e.g. 'ch02_ring'): it "
                             "names the folder grading/checks/chNN_<exercise>/ and the hidden-check module")
        if not self.chapter.startswith(f"{match.group(1)}_"):
            raise ValueError(f"exercise {self.name!r} says chapter {self.chapter!r}, whose number is not "
                             f"{match.group(1)}: name the solutions/ folder of chapter {match.group(1)}")
        if not self.answers or isinstance(self.answers, str):
            raise ValueError(f"exercise {self.name!r}: answers must be a tuple of the names the student "
                             f"defines, e.g. ('ring_all_reduce',), not {self.answers!r}")
        bad = {part: p for part, p in self.points.items() if not (isinstance(p, int) and p > 0)}
        if not self.points or bad:
            raise ValueError(f"exercise {self.name!r}: points must map each graded grade_id to a positive "
                             f"whole number of points; got {dict(self.points) or 'none'}")

    @property
    def chapter_number(self) -> str:
        return self.name[2:4]

    @property
    def files(self) -> tuple[str, ...]:
        """The files its folder of checks must hold."""
        return (*FIXED_FILES, RANKS_FILE) if self.on_ranks else FIXED_FILES

    @property
    def max_points(self) -> int:
        return sum(self.points.values())
