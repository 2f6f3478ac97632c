"""Feedback for an LMS's bulk upload (lms_feedback): each zip student's pages named as the LMS's download
named the submission, per LMS and assignment; the rest left out, with why."""

from __future__ import annotations

import zipfile

from course_lib.grading.autograder import class_files, json_files, lms_feedback


def _graded(grading, assignment: str, student: str, zip_name: str, pages=("hw",)) -> None:
    names = json_files.read_object(grading / class_files.ZIP_NAMES)
    names[f"{assignment}/{student}"] = zip_name
    grading.mkdir(exist_ok=True)
    json_files.write_atomically(grading / class_files.ZIP_NAMES, names)
    folder = grading / "feedback" / student / assignment
    folder.mkdir(parents=True, exist_ok=True)
    for page in pages:
        (folder / f"{page}.html").write_text(f"<p>{student}'s {page}</p>")


def test_canvas_and_moodle_students_get_their_pages_named_as_their_lms_matches_them(tmp_path):
    grading = tmp_path / "grading"
    _graded(grading, "hw", "48213", "smith-jonesmary_LATE_48213_990412_hw.zip")
    _graded(grading, "hw", "777", "Ada Lovelace_777_assignsubmission_file_my_work.zip")
    _graded(grading, "hw", "ann", "ann__hw.zip")           # the course's own naming: no LMS's
    _graded(grading, "hw", "48999", "bob_48999_990413_hw.zip", pages=())  # not graded yet
    written, left_out = lms_feedback.write_bundles(grading)
    assert set(written) == {"canvas-hw", "moodle-hw"}
    with zipfile.ZipFile(written["canvas-hw"]) as bundle:
        assert bundle.namelist() == ["smith-jonesmary_LATE_48213_990412_hw_feedback.html"]
        assert bundle.read(bundle.namelist()[0]) == b"<p>48213's hw</p>"
    with zipfile.ZipFile(written["moodle-hw"]) as bundle:
        [name] = bundle.namelist()
    # Moodle splits at the first four underscores: participant 777, plugin assignsubmission_file
    assert name.split("_", 4)[1:] == ["777", "assignsubmission", "file", "hw_feedback.html"]
    assert len(left_out) == 2 and "ann__hw.zip is not named as Canvas's or Moodle's" in left_out[1]
    assert "hw/48999: no feedback yet" in left_out[0]
    assert oct(written["canvas-hw"].parent.stat().st_mode & 0o777) == "0o700"
