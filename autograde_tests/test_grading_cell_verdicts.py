"""Fast tests of how a graded cell is scored and explained: a warning on stderr costs nothing, an error
costs the cell, and every cell below full marks carries its reason (feedback, review notes, grades.csv)."""

from __future__ import annotations

import csv
import json
import os
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import nbformat
from nbformat.v4 import new_code_cell, new_notebook
from nbgrader.api import Gradebook

from course_lib.grading.autograder import cell_verdicts, class_files, report, scoring
from course_lib.grading.autograder.judge import Verdict
from course_lib.grading.autograder.submissions import Submission
from course_lib.grading.sandbox.execute import CELL_TIMEOUT, OUTPUT_TRUNCATED

WARNING = ("[rank 0] /torch/distributed/distributed_c10d.py:4399: FutureWarning: "
           "`torch.distributed.all_gather_into_tensor` is deprecated.\n")


def _stream(name: str, text: str):
    return nbformat.NotebookNode(output_type="stream", name=name, text=text)


def _error(name: str, value: str):
    return nbformat.NotebookNode(output_type="error", ename=name, evalue=value,
                                 traceback=[f"{name}: {value}"])


def _test_cell(grade_id: str, *outputs, points: int = 3):
    cell = new_code_cell(f"check_{grade_id}()", outputs=list(outputs), execution_count=1)
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "grade_id": grade_id,
                                 "points": points}
    return cell


def test_a_warning_on_stderr_costs_nothing_an_error_costs_the_cell():
    notebook = new_notebook(cells=[
        _test_cell("warned", _stream("stdout", "gather_parameters: all good\n"), _stream("stderr", WARNING)),
        _test_cell("failed", _stream("stderr", WARNING), _error("AssertionError", "wrong shards on rank 1")),
        _test_cell("flooded", _stream("stdout", "x" * 10),
                   _stream("stderr", OUTPUT_TRUNCATED.format(limit=10))),
        _test_cell("clean", _stream("stdout", "ok\n")),
    ])
    scores = {("nb", gid): (0.0, False) for gid in ("warned", "failed", "flooded")}
    scores[("nb", "clean")] = (3.0, False)
    assert cell_verdicts.rescore(notebook, "nb", scores) == ["warned"]
    assert scores[("nb", "warned")] == (3.0, False)
    assert scores[("nb", "failed")] == scores[("nb", "flooded")] == (0.0, False)  # its error may be lost


def test_every_cell_below_full_marks_has_its_reason():
    notebook = new_notebook(cells=[
        _test_cell("failed", _error("AssertionError", "wrong shards on rank 1\nmore")),
        _test_cell("timed_out", _error(CELL_TIMEOUT, "A cell timed out")),
        _test_cell("judged", _stream("stdout", "ok\n")),
        _test_cell("both", _error("AssertionError", "in the notebook")),
        _test_cell("full", _stream("stderr", WARNING)),
    ])
    points = {"failed": 0.0, "timed_out": 0.0, "judged": 0.0, "both": 0.0, "full": 3.0}
    verdicts = {"judged": Verdict(False, "AssertionError: fresh inputs: wrong"),
                "both": Verdict(False, "AssertionError: in the judge"), "full": Verdict(True)}
    notebook.cells.append(_test_cell("unconfirmed", _stream("stdout", "ok\n")))   # no verdict, yet scored 0
    points["unconfirmed"] = 0.0
    reasons = cell_verdicts.reasons(notebook, "nb", points, verdicts)
    assert "could not confirm it" in reasons["unconfirmed"]
    assert reasons["failed"] == "0/3: AssertionError: wrong shards on rank 1"
    assert "ran past its time limit" in reasons["timed_out"]
    assert reasons["judged"] == "0/3: the isolated re-check failed: AssertionError: fresh inputs: wrong"
    assert "in the notebook" in reasons["both"] and "in the judge" in reasons["both"]
    assert "full" not in reasons
    cell_verdicts.annotate(notebook, reasons, {"full"})
    texts = ["".join(o.get("text", "") for o in cell.outputs) for cell in notebook.cells]
    assert "This test cell scores 0/3 points: AssertionError: wrong shards" in texts[0]
    assert "are warnings" in texts[4] and "cost no points" in texts[4]


def test_a_cell_the_notebook_fails_and_the_judge_passes_is_flagged():
    notebook = new_notebook(cells=[_test_cell("a", _error("NameError", "name 'scale' is not defined")),
                                   _test_cell("b", _stream("stdout", "ok"))])
    found = cell_verdicts.disagreements(notebook, "nb", {"a": 0.0, "b": 3.0},
                                        {"a": Verdict(True), "b": Verdict(True)})
    assert list(found) == ["a"] and "failed in the notebook («NameError" in found["a"]
    assert "passed the isolated re-check" in found["a"]


def _outcome(tmp_path: Path, notebook, verdicts) -> scoring.Outcome:
    """A private gradebook where nbgrader gave every cell 0 (its stderr rule), and the autograded notebook."""
    run_dir = tmp_path / "run"
    (run_dir / "db").mkdir(parents=True)
    with Gradebook(f"sqlite:///{run_dir / 'db' / 'gradebook.db'}") as gb:
        gb.add_assignment("hw")
        gb.add_notebook("hw", "hw")
        for cell in notebook.cells:
            grade_id = cell.metadata["nbgrader"]["grade_id"]
            gb.add_grade_cell(grade_id, "hw", "hw", max_score=3, cell_type="code")
        gb.add_student("ada")
        with warnings.catch_warnings():  # nbgrader's own autoflush warning, harmless here
            warnings.simplefilter("ignore")
            gb.add_submission("hw", "ada")
        for cell in notebook.cells:
            grade = gb.find_grade(cell.metadata["nbgrader"]["grade_id"], "hw", "hw", "ada")
            grade.auto_score = 0.0
        gb.db.commit()
    return scoring.Outcome(Submission("ada", "hw"), run_dir, True, "", 1.0, {"hw": notebook},
                           {"hw": verdicts})


def test_finish_scores_the_checks_verdict_and_keeps_every_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}")
    notebook = new_notebook(cells=[_test_cell("warned", _stream("stderr", WARNING)),
                                   _test_cell("wrong", _error("AssertionError", "wrong shards"))])
    verdicts = {"warned": Verdict(True), "wrong": Verdict(False, "AssertionError: x")}
    outcome = _outcome(tmp_path, notebook, verdicts)
    grading = tmp_path / "course" / "grading"
    grading.mkdir(parents=True)
    (grading / "gradebook.db").write_bytes((outcome.run_dir / "db" / "gradebook.db").read_bytes())
    run = SimpleNamespace(db_url=f"sqlite:///{grading / 'gradebook.db'}", grading_dir=grading)
    result = scoring.finish(run, SimpleNamespace(assignment="hw"), outcome)
    assert result.cells == {"warned": 3.0, "wrong": 0.0} and not result.needs_review
    assert result.lost == {"wrong": "0/3: AssertionError: wrong shards; the isolated re-check failed too: "
                                    "AssertionError: x"}
    texts = ["".join(o.get("text", "") for o in cell.outputs) for cell in notebook.cells]
    assert "are warnings" in texts[0] and "scores 0/3 points" in texts[1]
    class_files.write_outputs(grading, run.db_url, ["hw"], [result])
    notes = json.loads((grading / "review_notes.json").read_text())
    assert notes["hw/ada"]["lost_points"] == result.lost
    with (grading / "grades.csv").open() as handle:
        row = next(csv.DictReader(handle))
    assert row["score"] == "3.0" and "wrong 0/3: AssertionError: wrong shards" in row["lost_points"]


def test_review_notes_of_an_older_run_are_still_read(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}")
    (tmp_path / "review_notes.json").write_text(json.dumps({"hw/bob": ["the kernel died in test_it"]}))
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(url) as gb:
        gb.add_assignment("hw")
    class_files.write_outputs(tmp_path, url, ["hw"], [report.StudentResult("ada", "hw", 0, 3, [], 1.0, {},
                                                                           {"t": "0/3: why"})])
    notes = json.loads((tmp_path / "review_notes.json").read_text())
    assert notes["hw/bob"] == {"notes": ["the kernel died in test_it"], "lost_points": {}}
    assert notes["hw/ada"]["lost_points"] == {"t": "0/3: why"}


def test_a_kernel_judged_apart_shows_the_judges_warnings_as_warnings(tmp_path, monkeypatch):
    """With hidden checks judged apart the notebook ran no check: a right answer's warnings are those the
    judge saw, shown under its cell as stderr and told to cost nothing; a failed cell's are not shown."""
    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}")
    notebook = new_notebook(cells=[_test_cell("warned", _stream("stdout", "judged apart")),
                                   _test_cell("wrong", _stream("stdout", "judged apart"))])
    verdicts = {"warned": Verdict(True, stderr="rank 0: UserWarning: deprecated\n"),
                "wrong": Verdict(False, "AssertionError: x", stderr="rank 1: noise\n")}
    outcome = _outcome(tmp_path, notebook, verdicts)
    with Gradebook(f"sqlite:///{outcome.run_dir / 'db' / 'gradebook.db'}") as gb:
        gb.find_grade("warned", "hw", "hw", "ada").auto_score = 3.0   # no stderr in the notebook: full
        gb.db.commit()
    grading = tmp_path / "course" / "grading"
    grading.mkdir(parents=True)
    (grading / "gradebook.db").write_bytes((outcome.run_dir / "db" / "gradebook.db").read_bytes())
    run = SimpleNamespace(db_url=f"sqlite:///{grading / 'gradebook.db'}", grading_dir=grading)
    setup = SimpleNamespace(assignment="hw", policy=SimpleNamespace(judged_apart=True))
    result = scoring.finish(run, setup, outcome)
    assert result.cells == {"warned": 3.0, "wrong": 0.0}
    texts = ["".join(o.get("text", "") for o in cell.outputs) for cell in notebook.cells]
    assert "rank 0: UserWarning: deprecated" in texts[0] and "are warnings" in texts[0]
    assert "noise" not in texts[1] and "scores 0/3 points" in texts[1]
