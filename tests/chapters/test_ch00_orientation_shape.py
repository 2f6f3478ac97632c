"""Chapter 00 keeps the shape other parts rely on: its first widget is an IntSlider above its text.

The browser test moves the first IntSlider of the released chapter and expects the text beside it to change.
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = "00_orientation/00_orientation.ipynb"
WIDGET_CALL = re.compile(r"widgets\.(\w+)\(")


def code_cells(path: Path) -> list[str]:
    cells = json.loads(path.read_text())["cells"]
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in cells if c["cell_type"] == "code"]


@pytest.mark.parametrize("folder", ["solutions", "notebooks"])
def test_the_first_widget_is_an_int_slider_boxed_with_its_text(folder):
    cells = code_cells(ROOT / folder / CHAPTER)
    with_widgets = [source for source in cells if WIDGET_CALL.search(source)]
    assert with_widgets, f"{folder}/{CHAPTER} creates no ipywidgets widget"
    first = with_widgets[0]
    kinds = WIDGET_CALL.findall(first)
    assert kinds[0] == "IntSlider", f"the first widget is a {kinds[0]}; the browser test needs an IntSlider"
    assert "HTML" in kinds or "Output" in kinds, "the slider's cell must create the HTML/Output it updates"
    assert re.search(r"display\(widgets\.VBox\(\[\w+, \w+\]\)\)", first), "show slider and text in one VBox"
    assert ".observe(" in first, "the slider must re-render the text when it moves"


@pytest.mark.parametrize("folder", ["solutions", "notebooks"])
def test_the_chapter_draws_a_figure_before_any_exercise(folder):
    cells = code_cells(ROOT / folder / CHAPTER)
    first_exercise = next((i for i, s in enumerate(cells) if "NotImplementedError" in s
                           or "BEGIN SOLUTION" in s), len(cells))
    figures = [i for i, s in enumerate(cells) if "plt.show()" in s]
    sliders = [i for i, s in enumerate(cells) if "IntSlider(" in s]
    assert figures and figures[0] < first_exercise, "a matplotlib figure must come before the first exercise"
    assert sliders and sliders[0] < first_exercise, "Run All stops at an unanswered exercise: slider first"


@pytest.mark.slow
def test_the_release_runs_top_to_bottom_without_an_error():
    """The browser test runs every cell of the student's version: none may raise, exercise unanswered."""
    from tests.support.notebooks import execute_notebook

    execute_notebook(ROOT / "notebooks" / CHAPTER, cell_timeout=120, total_timeout=120)
