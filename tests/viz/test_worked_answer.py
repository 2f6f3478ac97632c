"""A problem's worked answer runs when the student asks (a button), or at once in the course's own runs."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell

from course_lib.viz import worked_answer as answers


@pytest.fixture
def shell(monkeypatch):
    monkeypatch.delenv(answers.SHOW_ANSWERS_ENV, raising=False)
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "course_lib.viz.worked_answer")
    shell.user_ns.pop("answer", None)
    yield shell
    shell.user_ns.pop("answer", None)


def test_run_all_shows_a_button_and_the_answer_only_when_it_is_pressed(shell, monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", shown.append)
    shell.run_cell("%%worked_answer\nanswer = 6 * 7").raise_error()
    assert "answer" not in shell.user_ns
    (box,) = shown
    button, output = box.children
    assert button.description == answers.BUTTON_LABEL
    button.click()
    assert shell.user_ns["answer"] == 42


def test_the_courses_own_runs_compute_the_answer_at_once(shell, monkeypatch):
    monkeypatch.setenv(answers.SHOW_ANSWERS_ENV, "1")
    shell.run_cell("%%worked_answer\nanswer = 6 * 7").raise_error()
    assert shell.user_ns["answer"] == 42
    with pytest.raises(answers.WorkedAnswerFailed):   # the cell fails, after the answer's own error
        shell.run_cell("%%worked_answer\n1 / 0").raise_error()
