"""A problem's worked answer, shown when the student asks for it (CHAPTERS.md: "printed only when the
student asks for it, after their own attempt").

Load it once in a chapter's Problems section, then start each answer cell with the cell magic::

    %load_ext course_lib.viz.worked_answer

    %%worked_answer
    print(...)            # the answer, computed with the chapter's functions

Run All shows a button under each problem; pressing it runs the cell's code in the notebook's namespace
and shows what it prints. Where ``COURSE_SHOW_ANSWERS=1`` (the course's own headless runs, which check
the answers' numbers), the code runs at once instead.
"""

from __future__ import annotations

import os

SHOW_ANSWERS_ENV = "COURSE_SHOW_ANSWERS"
BUTTON_LABEL = "Show the worked answer"


class WorkedAnswerFailed(RuntimeError):
    """A worked answer's own code raised (its traceback is printed above this error)."""


def answers_shown_at_once() -> bool:
    return os.environ.get(SHOW_ANSWERS_ENV) == "1"


def worked_answer(line: str, cell: str, shell=None) -> None:
    """The ``%%worked_answer`` cell magic: ``cell`` runs now (COURSE_SHOW_ANSWERS=1) or when the button
    under it is pressed. An error in the answer's code is shown like any cell's."""
    if shell is None:
        from IPython import get_ipython
        shell = get_ipython()
    if answers_shown_at_once():
        # as %%capture runs its cell; the error's traceback is already shown, so the cell fails short
        if not shell.run_cell(cell).success:
            raise WorkedAnswerFailed("the worked answer's code failed: its error is shown above") from None
        return
    import ipywidgets as widgets
    from IPython.display import display

    button = widgets.Button(description=line.strip() or BUTTON_LABEL, layout=widgets.Layout(width="auto"))
    shown = widgets.Output()

    def show(_):
        with shown:
            shown.clear_output()
            shell.run_cell(cell)

    button.on_click(show)
    display(widgets.VBox([button, shown]))


def load_ipython_extension(shell) -> None:
    """``%load_ext course_lib.viz.worked_answer`` registers the cell magic."""
    shell.register_magic_function(lambda line, cell: worked_answer(line, cell, shell),
                                  magic_kind="cell", magic_name="worked_answer")
