"""Fast tests of the grading pieces: vetting, zips, source extraction, isolated calls, reports."""

from __future__ import annotations

import io
import os
import sys
import zipfile

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook
from nbgrader.api import Gradebook

from autograde_tests.support import probe_course
from course_lib.grading.attempt.isolation import IsolatedCallError, map_isolated, solution_sources
from course_lib.grading.attempt.student_function import StudentFunction
from course_lib.grading.autograder import class_files, fixtures, report, review, submissions
from course_lib.grading.autograder.gradebook_merge import merge_student
from course_lib.grading.sandbox.policy import SandboxPolicy


def _shape(name="probe"):
    return submissions.AssignmentShape(name, {name: probe_course.probe_notebook()})


def _bytes(notebook) -> bytes:
    return nbformat.writes(notebook).encode()


def test_vet_keeps_a_good_notebook_without_notes():
    sub = submissions.vet("ann", _shape(), {"probe.ipynb": _bytes(probe_course.probe_notebook())}, {})
    assert list(sub.files) == ["probe.ipynb"] and sub.notes == [] and sub.zero_notebooks == []


def test_vet_notes_invalid_json_and_scores_it_zero():
    sub = submissions.vet("ann", _shape(), {"probe.ipynb": b'{"cells": [ oops'}, {})
    assert "probe" in sub.zero_notebooks and "not a valid notebook" in " ".join(sub.notes)


def test_vet_adopts_a_renamed_notebook_and_says_so():
    sub = submissions.vet("ann", _shape(), {"Copy of probe.ipynb": _bytes(probe_course.probe_notebook())}, {})
    assert "probe.ipynb" in sub.files and any("renamed" in note for note in sub.notes)


def test_vet_recognises_another_assignments_notebook():
    others = {"probe_other": submissions.AssignmentShape("probe_other",
                                                         {"probe_other": probe_course.other_notebook()})}
    sub = submissions.vet("ann", _shape(), {"probe.ipynb": _bytes(probe_course.other_notebook())}, others)
    assert sub.zero_notebooks == ["probe"] and "looks like probe_other" in " ".join(sub.notes)


def test_vet_notes_a_deleted_locked_cell():
    notebook = probe_course.probe_notebook()
    notebook.cells = [c for c in notebook.cells
                      if c.metadata.get("nbgrader", {}).get("grade_id") != "test_scale"]
    sub = submissions.vet("ann", _shape(), {"probe.ipynb": _bytes(notebook)}, {})
    assert any("'test_scale' was deleted" in note for note in sub.notes)


def test_student_ids_that_are_not_folder_names_are_refused():
    with pytest.raises(ValueError, match="not usable"):
        submissions.check_student_id("../etc")


def test_zip_names_follow_the_documented_pattern(tmp_path):
    for name in ("ann.zip", "bob_smith__02_collectives.zip"):
        with zipfile.ZipFile(tmp_path / name, "w") as bundle:
            bundle.writestr("work/02_collectives.ipynb", "{}")
            bundle.writestr("../../evil.txt", "x")
    found = submissions.collect_zips(tmp_path, submissions.DEFAULT_ZIP_PATTERN, "01_mlp_by_hand")
    assert set(found) == {("ann", "01_mlp_by_hand"), ("bob_smith", "02_collectives")}
    files = submissions.extract_zip(tmp_path / "ann.zip")
    assert set(files) == {"02_collectives.ipynb", "evil.txt"}  # flattened: no path leaves the folder


def test_a_timestamp_in_a_zip_is_the_students_and_the_grader_takes_its_own(tmp_path):
    # a forger dates its late submission before the deadline; the grader keeps when the zip reached it
    with zipfile.ZipFile(tmp_path / "ann__probe.zip", "w") as bundle:
        bundle.writestr("probe.ipynb", "{}")
        bundle.writestr("timestamp.txt", "2000-01-01 00:00:00.000000 UTC")
    os.utime(tmp_path / "ann__probe.zip", (1_700_000_000, 1_700_000_000))
    class_files.unpack_zips(tmp_path / "grading", tmp_path, submissions.DEFAULT_ZIP_PATTERN, None)
    stamp = (tmp_path / "grading" / "submitted" / "ann" / "probe" / "timestamp.txt").read_text()
    assert stamp == "2023-11-14 22:13:20.000000 UTC"
    assert "timestamp.txt" not in submissions.extract_zip(tmp_path / "ann__probe.zip")


def test_a_zip_student_gets_a_secret_of_the_graders_kept_while_the_zip_is_the_same(tmp_path):
    """nbgrader release_feedback hashes each feedback with the submission's secret (nbgrader submit makes
    one): a zip student gets one of the grader's, never one from the zip, the same on every unpacking (so
    an unchanged zip stays graded: graded_record), and the zip's own name is kept for lms_feedback."""
    with zipfile.ZipFile(tmp_path / "ann__probe.zip", "w") as bundle:
        bundle.writestr("probe.ipynb", "{}")
        bundle.writestr("submission_secret.txt", "the student's own")
    grading = tmp_path / "grading"
    secrets = []
    for _ in range(2):
        class_files.unpack_zips(grading, tmp_path, submissions.DEFAULT_ZIP_PATTERN, None)
        secrets.append((grading / "submitted" / "ann" / "probe" / "submission_secret.txt").read_text())
    assert secrets[0] == secrets[1] and len(secrets[0]) == 128 and secrets[0] != "the student's own"
    assert class_files.zip_names(grading) == {("probe", "ann"): "ann__probe.zip"}


def test_zip_without_an_assignment_is_refused_with_the_fix(tmp_path):
    (tmp_path / "ann.zip").write_bytes(b"")
    with pytest.raises(ValueError, match="names no assignment"):
        submissions.collect_zips(tmp_path, submissions.DEFAULT_ZIP_PATTERN, None)


def test_isolated_sources_keep_definitions_and_drop_calls_and_monkeypatches():
    cell = new_code_cell("import torch\nLIMIT = 3\ntorch.allclose = None\nprint('hi')\n%time x = 1\n"
                         "def f(x):\n    return x + LIMIT\nf(2)",
                         metadata={"nbgrader": {"solution": True, "grade_id": "f"}})
    [source] = solution_sources(new_notebook(cells=[cell]))
    assert "def f" in source and "LIMIT = 3" in source and "import torch" in source
    assert "allclose" not in source and "print" not in source and "f(2)" not in source


@pytest.mark.slow  # the first call imports torch (its weights-only loader checks the result)
def test_map_isolated_runs_sources_in_a_child_and_returns_plain_data():
    student = StudentFunction(name="f", sources=("def f(x):\n    return [x, x * 2]",))
    assert map_isolated(student, [(1,), (3,)]) == [[1, 2], [3, 6]]


@pytest.mark.slow
def test_map_isolated_child_runs_parallel_kernels_after_the_parent_did():
    """The parent's OpenMP pool, once used, must not hang the forked child's first parallel kernel."""
    import torch

    square = torch.randn(512, 512)
    (square @ square).sum()
    student = StudentFunction(name="f", sources=(
        "import torch\ndef f(n):\n    x = torch.ones(n, n)\n    return float((x @ x).sum())",))
    assert map_isolated(student, [(512,)], timeout=20) == [512.0**3]


@pytest.mark.parametrize("body, message", [
    ("raise ValueError('nope')", "ValueError: nope"),
    ("import os; os._exit(0)", "died"),
    ("import sys; sys.exit(3)", "SystemExit"),
    ("while True: pass", "did not return"),
    ("return lambda: 0", "not plain data"),
])
def test_map_isolated_reports_what_went_wrong(body, message):
    student = StudentFunction(name="f", sources=(f"def f(x):\n    {body}",))
    with pytest.raises(IsolatedCallError, match=message):
        map_isolated(student, [(1,)], timeout=1)


def test_map_isolated_child_cannot_change_the_parent():
    student = StudentFunction(name="f", sources=("import os\ndef f():\n    os.environ['LEAK'] = '1'\n",))
    map_isolated(student, [()])
    assert "LEAK" not in os.environ


def test_fixture_submission_replaces_only_named_cells():
    release = probe_course.probe_notebook()
    made = fixtures.make_submission(release, {"scale": "def scale(v, f):\n    return v"})
    changed = [a.source != b.source for a, b in zip(release.cells, made.cells, strict=True)]
    assert changed.count(True) == 1
    with pytest.raises(KeyError, match="no solution cell"):
        fixtures.make_submission(release, {"test_scale": "pass"})


def test_review_finds_dead_kernels_timeouts_and_shortens_deadlocks():
    cells = [new_code_cell("x", metadata={"nbgrader": {"grade_id": "ring"}}, outputs=[nbformat.NotebookNode(
        output_type="error", ename="RanksHungError", evalue="rank 0: line 3", traceback=["long"] * 50)])]
    notebook = new_notebook(cells=cells)
    # the deadlock note comes from the isolated re-check's own hang (review.hang_notes), not the error name
    assert not any("deadlocked" in note for note in review.execution_notes(notebook))
    review.shorten_deadlocks(notebook, {"ring"})
    assert notebook.cells[0].outputs[0].traceback == ["RanksHungError: deadlock detected", "rank 0: line 3"]


def test_summary_table_and_progress_bar_are_plain_text():
    results = [report.StudentResult("ann", "02", 3, 15, ["kernel died"], 1.5),
               report.StudentResult("bob", "02", 15, 15, [], 2.0)]
    table = report.summary_table(results)
    assert "ann" in table and "yes: kernel died" in table and "2 submissions graded, 1 marked" in table
    stream = io.StringIO()
    bar = report.ProgressBar(2, "grading", stream=stream)
    bar.advance("ann")
    bar.advance("bob")
    assert stream.getvalue().count("\n") == 2 and "2/2" in stream.getvalue()


def test_sandbox_policy_round_trips_through_json():
    policy = SandboxPolicy(uid=61005, hidden_paths=["/x"], home="/tmp/h")
    assert SandboxPolicy.from_json(policy.to_json()) == policy


def test_code_in_the_sandbox_is_told_it_is_being_graded(tmp_path):
    from course_lib.real.cluster.slurm_jobs import slurm_unavailable_reason
    from course_lib.real.plumbing.processes import call_in_fresh_child

    def caged() -> bytes:
        SandboxPolicy(uid=os.getuid(), gid=os.getgid(), home=str(tmp_path)).enter()
        return (slurm_unavailable_reason() or "").encode()

    assert "being graded" in call_in_fresh_child(caged, timeout=60, max_bytes=4096).decode()


def test_code_in_the_sandbox_sees_the_course_environment_not_the_graders(tmp_path, monkeypatch):
    # pytest's own variable once turned off ipykernel's capture of fd 1 and 2 in every grading kernel
    from course_lib.real.plumbing.processes import call_in_fresh_child

    monkeypatch.setenv("INSTRUCTOR_API_TOKEN", "secret")
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "test_x (call)")
    monkeypatch.setenv("COURSE_BACKEND", "gloo")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")

    def caged() -> bytes:
        SandboxPolicy(uid=os.getuid(), gid=os.getgid(), home=str(tmp_path)).enter()
        return " ".join(sorted(os.environ)).encode()

    seen = set(call_in_fresh_child(caged, timeout=60, max_bytes=65536).decode().split())
    assert not seen & {"INSTRUCTOR_API_TOKEN", "SLURM_JOB_ID", "PYTEST_CURRENT_TEST"}, seen
    assert {"PATH", "HOME", "COURSE_BACKEND", "OMP_NUM_THREADS", "COURSE_GRADED_RUN"} <= seen, seen


def _gradebook_with_one_cell(path) -> str:
    url = f"sqlite:///{path / 'gradebook.db'}"
    with Gradebook(url) as gb:
        gb.add_assignment("hw")
        gb.add_notebook("hw", "hw")
        gb.add_grade_cell("test_it", "hw", "hw", max_score=3, cell_type="code")
    return url


def _set_hand_score(url: str, points: float) -> None:
    with Gradebook(url) as gb:
        grade = gb.find_grade("test_it", "hw", "hw", "ada")
        grade.manual_score, grade.needs_manual_grade = points, False
        gb.db.commit()


def test_regrading_keeps_a_hand_score_until_the_automatic_score_changes(tmp_path, monkeypatch):
    # nbgrader creates a gradebook by running `alembic` from PATH: the one beside this Python
    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}")
    url = _gradebook_with_one_cell(tmp_path)
    key = ("hw", "test_it")
    first = merge_student(url, "hw", "ada", {key: (0.0, False)}, review_cells={key}, review_all=False)
    assert [(c.points, c.needs_review) for c in first.cells] == [(0.0, True)]
    _set_hand_score(url, 2.0)  # the instructor reviewed it in formgrader
    again = merge_student(url, "hw", "ada", {key: (0.0, False)}, review_cells={key}, review_all=False)
    assert [(c.points, c.needs_review) for c in again.cells] == [(2.0, False)]
    changed = merge_student(url, "hw", "ada", {key: (3.0, False)}, review_cells=set(), review_all=False)
    assert [(c.points, c.needs_review) for c in changed.cells] == [(3.0, True)]
    with Gradebook(url) as gb:
        assert gb.find_grade("test_it", "hw", "hw", "ada").manual_score is None


def test_an_assignment_may_have_its_own_cell_timeout(tmp_path):
    from course_lib.grading.autograder.class_run import GradingRun
    from course_lib.grading.settings import read_settings

    (tmp_path / "nbgrader_config.py").write_text(
        "c = get_config()\nc.CourseDirectory.course_id = 'hw'\nc.ExecutePreprocessor.timeout = 60\n"
        "c.CourseGrading.cell_timeouts = {'09_on_the_cluster': 300}\n")
    settings = read_settings(tmp_path)
    assert settings.cell_timeouts == {"09_on_the_cluster": 300}
    run = GradingRun(course_root=tmp_path, course=settings)
    assert run.course.cell_timeout_for("09_on_the_cluster") == 300
    assert run.course.cell_timeout_for("02_collectives") == 60


def test_a_grading_run_refuses_course_settings_it_cannot_grade_with(tmp_path):
    from dataclasses import replace

    from course_lib.grading.autograder.class_run import GradingRun, checkout_settings
    from course_lib.grading.settings import CourseSettings

    with pytest.raises(ValueError, match="c.CourseDirectory.course_id"):
        GradingRun(course_root=tmp_path, course=CourseSettings(cell_timeout=60))
    with pytest.raises(ValueError, match="cell_timeout must be a positive number"):
        GradingRun(course_root=tmp_path, course=replace(checkout_settings(), cell_timeout=0))
    with pytest.raises(ValueError, match="without hidden_checks"):
        GradingRun(course_root=tmp_path, course=replace(checkout_settings(), hidden_checks=()))
    with pytest.raises(ValueError, match="must be a CourseSettings"):
        GradingRun(course_root=tmp_path, course={"course_id": "x"})
    with pytest.raises(ValueError, match="jobs must be"):
        GradingRun(course_root=tmp_path, jobs=0)
    assert GradingRun(course_root=tmp_path).course.course_id == "distributed-training"
