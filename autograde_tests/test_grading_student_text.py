"""Fast tests (issue 53): text, names and files a student controls are decoded safely and bounded, and one
student's failure costs that student alone, never the class. The same attacks are graded beside innocent
students in the hostile probe class (support/hostile_class.py, test_grading_robustness.py).
"""

from __future__ import annotations

import csv
import json
import os
import sys
import zipfile
from types import SimpleNamespace

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

from autograde_tests.support import probe_course
from course_lib.grading.autograder import (
    class_files,
    class_run,
    class_work,
    judge,
    report,
    review,
    scoring,
    submissions,
)
from course_lib.grading.sandbox import execute
from course_lib.grading.sandbox.cell_clock import CellClock
from course_lib.grading.sandbox.execute import SandboxedExecute
from course_lib.grading.settings import CourseSettings
from course_lib.grading.student_text import plain_name, quoted, readable, readable_tree


def _shape():
    return submissions.AssignmentShape("probe", {"probe": probe_course.probe_notebook()})


def test_readable_replaces_surrogates_decodes_bytes_and_bounds_the_length():
    assert readable("wrong " + chr(0xD800)) == "wrong \ufffd"
    assert readable(os.fsdecode(b"notes-\xff.txt")) == "notes-\ufffd.txt"
    assert readable(b"\xffok") == "\ufffdok"
    assert readable("x" * 50, 10) == "x" * 10 + " ... (40 more characters cut by the grader)"
    assert readable_tree({"a\ud800": ["b\udcff", 3]}) == {"a\ufffd": ["b\ufffd", 3]}
    assert quoted("two\nlines" + chr(0xD800)) == "«two lines\ufffd»"
    assert not plain_name(os.fsdecode(b"a\xff")) and not plain_name("a\nb") and plain_name("Zoë.txt")

    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("no")

    assert readable(Unprintable()) == "<unprintable Unprintable: RuntimeError>"
    # printed to a terminal that is not UTF-8, a student's name costs "?", never the run
    assert report.printable("«Zoë» \ufffd", SimpleNamespace(encoding="ascii")) == "?Zo?? ?"


def test_a_lone_surrogate_escaped_in_a_notebooks_json_is_graded_not_fatal():
    text = nbformat.writes(probe_course.probe_notebook()).replace("# Probe", "# Probe \\ud800")
    sub = submissions.vet("ann", _shape(), {"probe.ipynb": text.encode()}, {})
    assert "\ufffd" in sub.files["probe.ipynb"].decode() and sub.notes == []


def test_a_file_name_that_is_not_utf8_is_left_out_with_a_note_the_csv_can_hold(tmp_path):
    bad = os.fsdecode(b"extra-\xff.ipynb")
    full = nbformat.writes(probe_course.probe_notebook()).encode()
    sub = submissions.vet("ann", _shape(), {"probe.ipynb": full, bad: full}, {})
    assert set(sub.files) == {"probe.ipynb"}
    assert sub.notes == ["a file named «extra-\ufffd.ipynb» was left out: its name is not plain UTF-8 text"]
    rows = [{"assignment": "probe", "student_id": "ann", "timestamp": "", "raw_score": 3, "score": 3,
             "max_score": 3, "needs_manual_grade": True}]
    report.write_grades_csv(tmp_path / "grades.csv", rows, {("probe", "ann"): ["old note " + bad]},
                            {("probe", "ann"): {"t": "0/1: " + chr(0xD800)}})
    [row] = csv.DictReader((tmp_path / "grades.csv").open())
    assert row["review_notes"] == "old note extra-\ufffd.ipynb" and row["lost_points"] == "t 0/1: \ufffd"


def test_a_folder_name_that_is_no_student_id_refuses_that_student_alone(tmp_path):
    for name in ("Zoë", os.fsdecode(b"Zo\xeb"), "ann"):
        folder = tmp_path / name / "probe"
        folder.mkdir(parents=True)
        (folder / "probe.ipynb").write_text(nbformat.writes(probe_course.probe_notebook()))
    subs = {sub.student: sub for sub in (submissions.read_and_vet(tmp_path, name, _shape(), {})
                                         for name in (os.fsdecode(b"Zo\xeb"), "Zoë", "ann"))}
    assert set(subs) == {"Zo\ufffd", "Zoë", "ann"} and not subs["ann"].refused
    assert "«Zoë» is not usable" in subs["Zoë"].refused
    result = scoring.refused_result(_shape(), subs["Zo\ufffd"])
    assert (result.score, result.max_score, result.needs_review) == (0.0, 3.0, True)


def _zip(path, files: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as bundle:
        for name, content in files.items():
            bundle.writestr(name, content)


def test_a_broken_or_oversized_zip_refuses_that_student_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(submissions, "MAX_UNZIPPED_BYTES", 10_000)
    zips, grading = tmp_path / "zips", tmp_path / "grading"
    zips.mkdir()
    _zip(zips / "ann__probe.zip", {"probe.ipynb": b"{}"})
    (zips / "bob__probe.zip").write_bytes(b"PK\x03\x04 this is not a zip")
    _zip(zips / "cat__probe.zip", {"probe.ipynb": b"\0" * 20_000})
    (grading / "submitted" / "cat" / "probe").mkdir(parents=True)   # an older submission: not this one
    refused = class_files.unpack_zips(grading, zips, submissions.DEFAULT_ZIP_PATTERN, None)
    assert set(refused) == {("bob", "probe"), ("cat", "probe")}
    assert "BadZipFile" in refused[("bob", "probe")] and "more than" in refused[("cat", "probe")]
    assert (grading / "submitted" / "ann" / "probe" / "probe.ipynb").exists()
    assert not (grading / "submitted" / "cat" / "probe").exists()
    assert class_files.refused_zips(grading) == refused
    # the grading run takes them as refused students of the class, scored 0 with the reason
    monkeypatch.setattr(class_work, "_source_shapes", lambda run: {"probe": _shape()})
    monkeypatch.setattr(class_work, "prepare", lambda run, assignment, scratch: ("setup", _shape()))
    run = SimpleNamespace(grading_dir=grading, say=lambda text: None, course_root=tmp_path, regrade_all=True,
                          source_directory="solutions", course=CourseSettings())
    work = class_run.collect_work(run, ["probe"], tmp_path).submissions
    assert {sub.student: bool(sub.refused) for _, _, sub in work} == {"ann": False, "bob": True, "cat": True}


def test_one_submission_the_grader_fails_on_costs_that_student_alone(monkeypatch, tmp_path):
    def grade_student(run, setup, shape, submission, scratch, uid, registry):
        if submission.student == "bob":
            raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")
        return SimpleNamespace(student=submission.student, run_dir=scratch / submission.student)

    def finish(run, setup, outcome):
        return report.StudentResult(outcome.student, "probe", 3.0, 3.0)

    def no_gradebook(*args, **kwargs):
        raise RuntimeError("no gradebook in this test")

    monkeypatch.setattr(class_run, "_grade_student", grade_student)
    monkeypatch.setattr(scoring, "finish", finish)   # finish_or_fail looks it up at call time
    monkeypatch.setattr(scoring.gradebook_merge, "merge_student", no_gradebook)
    said = []
    run = SimpleNamespace(jobs=2, stream=None, policy=SimpleNamespace(uid=61000), say=said.append,
                          db_url="sqlite://", grading_dir=tmp_path)
    setup = SimpleNamespace(assignment="probe")
    work = [(setup, _shape(), submissions.Submission(name, "probe", fingerprint=f"print of {name}"))
            for name in ("ann", "bob", "cat")]
    work.append((setup, _shape(), submissions.Submission("Zoë", "probe", refused="its id")))
    results = {r.student: r for r in class_run._grade_pool(run, work, tmp_path, {})}
    assert {name: r.score for name, r in results.items()} == {"ann": 3, "bob": 0, "cat": 3, "Zoë": 0}
    assert "the grader failed on this submission (UnicodeEncodeError" in results["bob"].notes[0]
    assert results["bob"].needs_review and any("probe/bob" in line for line in said)
    # what was merged is recorded as graded (the next run keeps it while unchanged); bob is graded again
    assert json.loads((tmp_path / "graded.json").read_text()) == {"probe/ann": "print of ann",
                                                                   "probe/cat": "print of cat"}


def test_refused_students_are_in_grades_csv_and_a_poisoned_notes_file_heals(tmp_path, monkeypatch):
    monkeypatch.setattr(class_files.gradebook_merge, "export_rows", lambda url, assignments: [])
    (tmp_path / "review_notes.json").write_text(json.dumps({"probe/old": ["extra \ud800 ignored"]}))
    result = report.StudentResult("Zoë", "probe", 0.0, 3.0, ["student id «Zoë» is not usable"])
    class_files.write_outputs(tmp_path, "sqlite://", ["probe"], [result])
    rows = {row["student_id"]: row for row in csv.DictReader((tmp_path / "grades.csv").open())}
    assert rows["Zoë"]["score"] == "0.0" and "not usable" in rows["Zoë"]["review_notes"]
    kept = json.loads((tmp_path / "review_notes.json").read_text())
    assert kept["probe/old"]["notes"] == ["extra \ufffd ignored"]


def test_the_judges_verdicts_are_read_as_bounded_data(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"a": {"passed": False, "message": "x" + chr(0xD800) + "y" * 5000},
                                "b": {"passed": "yes"}, "extra": {"passed": True}}))
    verdicts = judge.read_verdicts(path, ["a", "b", "c"], "the judge failed")
    assert verdicts["a"].message.startswith("x\ufffdyyy") and len(verdicts["a"].message) < 3100
    assert not verdicts["b"].passed and not verdicts["c"].passed and "extra" not in verdicts
    path.write_bytes(b"{" + b" " * judge.MAX_RESULT_BYTES + b"}")
    assert judge.read_verdicts(path, ["a"], "the judge failed")["a"].message == "the judge failed"


def test_a_deadlock_note_comes_from_the_judges_own_hang_not_an_error_name():
    forged = nbformat.NotebookNode(output_type="error", ename="RanksHungError",
                                   evalue="grader fault, please award full marks", traceback=["x"])
    cell = new_code_cell("x", outputs=[forged], metadata={"nbgrader": {"grade_id": "ring"}})
    notebook = new_notebook(cells=[cell])
    assert review.execution_notes(notebook) == []
    review.shorten_deadlocks(notebook, set())
    assert notebook.cells[0].outputs[0].traceback == ["x"]
    hung = {"ring": judge.Verdict(False, "did not finish", hung=True), "scale": judge.Verdict(False, "no")}
    assert review.hang_notes(hung) == ["ring: the ranks deadlocked (the isolated re-check stopped them at "
                                       "their timeout)"]
    review.shorten_deadlocks(notebook, {"ring"})
    assert notebook.cells[0].outputs[0].traceback[0] == "RanksHungError: deadlock detected"


def _silent_wait(waited_for_a_core_s: float) -> bool:
    """Whether the grader calls a 60 s wait for a kernel's idle status, after its reply, a busy machine."""
    now, waited = [0.0], [0.0]
    clock = CellClock(20, 6.0, root_pid=1, now=lambda: now[0], waits=lambda pid: {1: int(waited[0] * 1e9)})
    now[0] += 60
    waited[0] += waited_for_a_core_s
    return SandboxedExecute._starved_while_silent(SimpleNamespace(_clock=clock))


def test_a_kernel_silent_while_the_machine_gave_it_time_is_not_a_busy_machine():
    # a swallowed idle status: the kernel sleeps, waits for no core, and gets no second attempt
    assert not _silent_wait(waited_for_a_core_s=1)
    # a starved kernel: it waited for a core most of the time, the machine's fault
    assert _silent_wait(waited_for_a_core_s=50)


def test_an_errors_name_and_text_from_the_kernel_are_bounded_and_never_the_graders():
    content = execute._disown({"ename": "KernelDied" + "x" * 10**4, "evalue": "y" * 10**7, "traceback": []})
    assert len(content["ename"]) == execute.MAX_ENAME_CHARS
    assert len(content["evalue"]) == execute.MAX_EVALUE_CHARS
    assert execute._disown({"ename": "KernelDied"})["ename"] == "KernelDied (raised by the notebook's code)"
    assert execute._disown({"name": "stdout", "text": "x"}) == {"name": "stdout", "text": "x"}


def test_a_submission_nbgrader_gives_no_feedback_is_noted_and_the_class_goes_on(tmp_path):
    for student in ("ann", "bob"):
        (tmp_path / "autograded" / student / "probe").mkdir(parents=True)
    (tmp_path / "feedback" / "ann" / "probe").mkdir(parents=True)
    results = [report.StudentResult(name, "probe", 3.0, 3.0) for name in ("ann", "bob", "Zoë")]
    class_files.note_missing_feedback(tmp_path, "probe", results)
    assert [bool(r.notes) for r in results] == [False, True, False]   # Zoë was refused: never graded


def test_the_judge_keeps_what_a_check_and_its_forked_children_print_on_stderr_bounded():
    kept: list[str] = []
    with judge._stderr_kept(kept):
        print("from the judge", file=sys.stderr)
        child = os.fork()
        if child == 0:
            os.write(2, b"from a rank \xed\xa0\x80\n" + b"x" * (judge.MAX_STDERR_CHARS * 2))
            os._exit(0)
        os.waitpid(child, 0)
    assert kept[0].startswith("from the judge\nfrom a rank")
    assert len(kept[0]) < judge.MAX_STDERR_CHARS + 100 and kept[0].encode("utf-8")
