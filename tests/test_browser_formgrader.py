"""Formgrader as the instructor sees it: JupyterLab on a graded demo class, formgrader lists the
assignment and the one submission flagged for review, a hand score given there is saved, and the
next `make grade` keeps it (the rule docs/instructors.md states, section 5).

The class is the probe assignment's (autograde_tests/support/probe_course.py): a full-marks submission and a
full-marks submission that came with an extra notebook, which flags it for review.
"""

from __future__ import annotations

import io
import shutil
import time
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from autograde_tests.support import probe_course
from course_lib.grading.autograder import class_run, demo
from tests.support.jupyter_server import running_jupyterlab
from tests.test_browser import ARTIFACTS, launch_chromium

HAND_SCORE = 1.5  # of test_scale's 2 points, which the flagged submission earned automatically


def graded_class(root: Path) -> class_run.GradingRun:
    course = probe_course.build(root / "course")
    class_root = root / "class"
    demo.write_class(course, class_root, "probe", 1)  # full_marks only: the cheapest class with a flag
    flagged = class_root / "grading" / "submitted" / "flagged" / "probe"
    shutil.copytree(class_root / "grading" / "submitted" / "full_marks" / "probe", flagged)
    nbformat.write(nbformat.v4.new_notebook(), flagged / "scratch.ipynb")
    (class_root / "nbgrader_config.py").write_text(
        "c = get_config()  # noqa: F821\n"
        f"c.CourseDirectory.root = {str(class_root)!r}\n"
        "c.CourseDirectory.course_id = 'distributed-training'\n"
        "c.CourseDirectory.source_directory = 'solutions'\n"
        "c.CourseDirectory.submitted_directory = 'grading/submitted'\n"
        "c.CourseDirectory.autograded_directory = 'grading/autograded'\n"
        "c.CourseDirectory.feedback_directory = 'grading/feedback'\n"
        f"c.CourseDirectory.db_url = 'sqlite:///{class_root / 'grading' / 'gradebook.db'}'\n")
    run = class_run.GradingRun(course_root=class_root, course=probe_course.PROBE_SETTINGS, jobs=2,
                               feedback=False, stream=io.StringIO())
    class_run.grade(run, ["probe"])
    return run


def scale_grade(run: class_run.GradingRun, student: str):
    with Gradebook(run.db_url) as gb:
        grade = gb.find_grade("test_scale", "probe", "probe", student)
        return grade.auto_score, grade.manual_score, grade.needs_manual_grade, grade.score


def wait_for_hand_score(run: class_run.GradingRun, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while (grade := scale_grade(run, "flagged"))[1] != HAND_SCORE:
        assert time.monotonic() < deadline, f"formgrader did not save the hand score: {grade}"
        time.sleep(0.3)


@pytest.mark.slow
@pytest.mark.browser
def test_formgrader_hand_score_survives_the_next_make_grade(tmp_path, monkeypatch):
    from playwright.sync_api import expect, sync_playwright

    run = graded_class(tmp_path)
    assert scale_grade(run, "flagged") == (2.0, None, True, 2.0)
    with Gradebook(run.db_url) as gb:
        flagged_id = gb.find_submission_notebook("probe", "probe", "flagged").id
    monkeypatch.chdir(run.course_root)  # formgrader reads nbgrader_config.py from the server's folder
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with running_jupyterlab(run.course_root, tmp_path) as lab, sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            page.goto(lab.url("formgrader/manage_assignments"))
            expect(page.locator("#main-table")).to_contain_text("probe", timeout=60_000)
            page.goto(lab.url("formgrader/gradebook/probe/probe"))
            flagged_rows = page.locator("tr", has=page.locator(".needs-manual-grade span"))
            expect(flagged_rows).to_have_count(1, timeout=60_000)
            flagged_rows.first.locator(f"a[href*='submissions/{flagged_id}']").first.click()
            score = page.locator("input.score#test_scale")
            expect(score).to_be_visible(timeout=60_000)
            score.fill(str(HAND_SCORE))
            score.press("Tab")  # formgrader saves a score on its change event
            wait_for_hand_score(run)
            page.screenshot(path=str(ARTIFACTS / "formgrader-hand-score.png"))
        finally:
            browser.close()
    assert scale_grade(run, "flagged") == (2.0, HAND_SCORE, False, HAND_SCORE)

    run.regrade_all = True   # an unchanged submission is not graded again at all: grade it, keep the score
    class_run.grade(run, ["probe"])
    assert scale_grade(run, "flagged") == (2.0, HAND_SCORE, False, HAND_SCORE)
    assert scale_grade(run, "full_marks")[3] == 2.0
