"""Every chapter through the whole grading pipeline: the reference solution earns full marks and needs no
review, the release left unanswered earns 0 without stopping the run, and each wrong answer sent through
nbgrader earns exactly the points per test cell its expected_scores.json gives it.

One row of support/chapter_classes.CHAPTERS per exercise; its grading run is the session fixture the row
names (conftest.py).
"""

from __future__ import annotations

import pytest

from autograde_tests.conftest import GRADING_RUN_TIMEOUT_S
from autograde_tests.support.chapter_classes import CHAPTERS, Chapter

# Each test asks for its chapter's grading run by name (request.getfixturevalue), so conftest's hook cannot
# see it: whichever test first pays for a run gets the run's time.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(GRADING_RUN_TIMEOUT_S)]

CASES = [pytest.param(chapter, suffix, id=f"{chapter.fixtures or chapter.assignment}-{suffix}")
         for chapter in CHAPTERS for suffix in chapter.expected()]


def test_every_chapter_has_graded_cells():
    for chapter in CHAPTERS:
        assert sum(chapter.expected()["solution"].values()) > 0, chapter.assignment


@pytest.mark.parametrize("chapter, suffix", CASES)
def test_submission_earns_exactly_its_expected_points(request, chapter: Chapter, suffix: str):
    graded = request.getfixturevalue(chapter.run)
    result = graded.results[(chapter.assignment, f"{chapter.prefix}_{suffix}")]
    expected = chapter.expected()[suffix]
    got = {cell: result.cells.get(cell) for cell in expected}
    assert got == expected, f"{chapter.assignment}/{suffix}: {result.notes}"
    if suffix == "solution":
        assert not result.needs_review, result.notes
