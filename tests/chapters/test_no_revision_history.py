"""Issue 55: a notebook's text holds what is true on the student's machine, never the course's own history:
no date a review or a run of ours happened on, no "when this chapter was reviewed", no "before the X was
measured" (quiet-run figures and what changed live in benchmarks/README.md). A date inside a citation (a
commit's, a paper's) is a source, not history, and stays."""

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "solutions").glob("*/*.ipynb")) + sorted((ROOT / "notebooks").glob("*/*.ipynb"))
HISTORY = re.compile(r"this chapter was (reviewed|written|revised)|when (it|we) was reviewed|review of 20\d\d"
                     r"|\b(before|until) the [\w ]{1,40} (was|were) (measured|added|fixed|modelled)"
                     r"|an earlier version of this (chapter|notebook|cell)|used to (print|say|read)",
                     re.IGNORECASE)
OUR_RUN_DATE = re.compile(r"(reviewed|measured|ran|run|runs) (on|of)? ?\(?20\d\d-\d\d-\d\d", re.IGNORECASE)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_no_notebook_tells_the_courses_own_history(path):
    for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
        text = " ".join(cell.source.split())
        for pattern in (HISTORY, OUR_RUN_DATE):
            found = pattern.search(text)
            assert not found, f"cell {index}: {text[max(0, found.start() - 80):found.end() + 80]!r}"


def test_the_rule_catches_what_it_is_for():
    assert HISTORY.search("When this chapter was reviewed (2026-11-28, before the segments")
    assert HISTORY.search("Before the dropped handles were measured, the ring's all-reduces took")
    assert OUR_RUN_DATE.search("the runs of 2026-11-28 had 9 of 11")
    assert not HISTORY.search("which entered the repository in commit d4c86e3, 2025-01-30")
    assert not OUR_RUN_DATE.search("which entered the repository in commit d4c86e3, 2025-01-30")
