"""`make export`: the class gradebook in Canvas's and Moodle's import formats, column by column (fast: a
gradebook built with nbgrader's API, as `make grade` leaves it).

The class: two assignments; Ada (on the roster, with her Canvas user id) submitted both, the second late
with half off; Smith-Jones (a hyphenated id, as Canvas zips name him) only the first; Bob nothing; a roster
name that a spreadsheet would run as a formula.
"""

from __future__ import annotations

import csv
import os
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from course_lib.grading.autograder import lms_export

REPO = Path(__file__).resolve().parents[1]


def _submit(gb: Gradebook, assignment: str, student: str, points: float, penalty: float = 0.0) -> None:
    with warnings.catch_warnings():   # nbgrader's own autoflush warning
        warnings.simplefilter("ignore")
        gb.add_submission(assignment, student)
    gb.find_grade("test_it", assignment, assignment, student).auto_score = points
    gb.find_submission_notebook(assignment, assignment, student).late_submission_penalty = penalty
    gb.db.commit()


@pytest.fixture(scope="module")
def grading_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("course") / "grading"
    folder.mkdir(mode=0o700)
    os.environ["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"  # alembic
    with Gradebook(f"sqlite:///{folder / 'gradebook.db'}") as gb:
        for assignment, points in (("01_mlp_by_hand", 7), ("02_collectives", 19)):
            gb.add_assignment(assignment)
            gb.add_notebook(assignment, assignment)
            gb.add_grade_cell("test_it", assignment, assignment, max_score=points, cell_type="code")
        gb.add_student("ada", first_name="Ada", last_name="Lovelace", email="ada@example.edu",
                       lms_user_id="101")
        gb.add_student("smith-jones")
        gb.add_student("bob", first_name="Bob", last_name="=HYPERLINK(\"http://x\")", email="bob@example.edu")
        _submit(gb, "01_mlp_by_hand", "ada", 7)
        _submit(gb, "02_collectives", "ada", 18, penalty=9)
        _submit(gb, "01_mlp_by_hand", "smith-jones", 3.5)
    return folder


def _read(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


def test_canvas_columns_points_and_scores(grading_dir):
    rows = _read(lms_export.write_exports(grading_dir)["canvas"])
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "01_mlp_by_hand",
                       "02_collectives"]
    assert rows[1] == ["    Points Possible", "", "", "", "", "7", "19"]
    students = {row[3]: row for row in rows[2:]}
    assert students["ada"] == ["Lovelace, Ada", "101", "", "ada", "", "7", "9"]   # 18 less the late half
    assert students["smith-jones"] == ["smith-jones", "", "", "smith-jones", "", "3.5", ""]
    assert students["bob"] == ["'=HYPERLINK(\"http://x\"), Bob", "", "", "bob", "", "", ""]
    assert len(rows) == 2 + 3


def test_moodle_columns_and_scores(grading_dir):
    rows = _read(lms_export.write_exports(grading_dir)["moodle"])
    assert rows[0] == ["ID number", "Email address", "First name", "Last name", "01_mlp_by_hand",
                       "02_collectives"]
    students = {row[0]: row for row in rows[1:]}
    assert students["ada"] == ["ada", "ada@example.edu", "Ada", "Lovelace", "7", "9"]
    assert students["smith-jones"] == ["smith-jones", "", "", "", "3.5", ""]
    assert students["bob"] == ["bob", "bob@example.edu", "Bob", "'=HYPERLINK(\"http://x\")", "", ""]


def test_the_exports_stay_in_the_private_grading_folder(grading_dir):
    written = lms_export.write_exports(grading_dir)
    assert {path.parent for path in written.values()} == {grading_dir / "exports"}
    assert stat.S_IMODE((grading_dir / "exports").stat().st_mode) == 0o700
    ignored = subprocess.run(["git", "check-ignore", "-q", "grading/exports/canvas.csv"], cwd=REPO)
    assert ignored.returncode == 0, "grading/ must stay ignored by git"


def test_export_before_any_grading_says_what_to_run(tmp_path, capsys, monkeypatch):
    from course_lib.grading import cli
    monkeypatch.setattr(cli, "ROOT", tmp_path)
    assert cli.main(["export"]) == 1
    assert "run `make grade` first" in capsys.readouterr().err
