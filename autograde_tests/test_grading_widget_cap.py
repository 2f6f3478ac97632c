"""Issue 53: a notebook's widget state (ipywidgets' comm messages, which nbclient keeps for the notebook's
metadata), an Output widget's captured output and display updates stay under the grader's output cap,
with a note."""

from __future__ import annotations

import json

import pytest
from nbformat.v4 import new_code_cell, new_notebook

from course_lib.grading.sandbox import execute
from course_lib.grading.sandbox.widget_budget import WidgetBudget

WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def _state_msg(comm_id, state, paths=None, buffers=None):
    data = {"state": state, **({"buffer_paths": paths} if paths is not None else {})}
    return {"content": {"comm_id": comm_id, "data": data}, "buffers": buffers or []}


def test_a_widget_state_is_kept_until_the_notebooks_widgets_reach_the_limit():
    budget = WidgetBudget(limit=1000)
    assert budget.admit(_state_msg("a", {"value": "x" * 600}))
    assert not budget.admit(_state_msg("b", {"value": "x" * 600}))      # 1200 > 1000: refused
    assert budget.admit(_state_msg("b", {"value": "x" * 300}))
    assert budget.total == 900 + 2 * len('"value": ')
    assert not budget.admit(_state_msg("c", {"k" * 200 + str(i): "" for i in range(10)}))   # names count


def test_a_state_that_replaces_an_older_one_gives_its_bytes_back():
    budget = WidgetBudget(limit=1000)
    for step in range(10_000):   # a progress bar's updates: the notebook keeps only the last
        assert budget.admit(_state_msg("bar", {"value": step, "description": "x" * 500}))
    assert budget.total < 1000


def test_buffers_count_as_nbclient_stores_them_and_odd_messages_are_not_kept():
    budget = WidgetBudget(limit=1000)
    assert not budget.admit(_state_msg("img", {}, paths=[["value"]], buffers=[b"x" * 800]))  # base64: 1068
    assert budget.admit(_state_msg("img", {}, paths=[["value"]], buffers=[b"x" * 600]))
    assert not budget.admit(_state_msg("odd", ["not", "a", "dict"]))
    assert not budget.admit(_state_msg("odd", {}, paths=[[{"not": "a key"}]], buffers=[b"x"]))
    assert budget.admit({"content": {"comm_id": "c", "data": {"method": "custom"}}})   # no state kept


WIDGET_FLOOD = """import ipywidgets
boxes = [ipywidgets.Text(value=str(i) * 400_000) for i in range(5)]   # 2 MB of widget state
"""
OUTPUT_WIDGET_FLOOD = """import ipywidgets
from IPython.display import display
out = ipywidgets.Output()
display(out)
with out:
    for _ in range(30):
        print("y" * 100_000)   # 3 MB captured by the Output widget, never the cell's own output
"""

DISPLAY_UPDATE_FLOOD = """from IPython.display import display, update_display
for i in range(20):
    display({"text/plain": "x"}, raw=True, display_id=f"shown{i}")
for i in range(20):   # 10 MB by updates, which nbclient applied past the cap
    update_display({"text/plain": "y" * 500_000}, raw=True, display_id=f"shown{i}")
"""


@pytest.mark.slow   # a real kernel (~10 s)
def test_widget_state_and_an_output_widget_stay_under_the_cap_with_a_note():
    notebook = new_notebook(cells=[new_code_cell(WIDGET_FLOOD), new_code_cell(OUTPUT_WIDGET_FLOOD),
                                   new_code_cell(DISPLAY_UPDATE_FLOOD), new_code_cell("print('after')")],
                            metadata={"kernelspec": {"name": "python3", "language": "python",
                                                     "display_name": "Python 3"}})
    step = execute.SandboxedExecute(timeout=60, kernel_name="python3", max_output_bytes=1_000_000)
    notebook, _ = step.preprocess(notebook, {"metadata": {"path": "."}})
    widgets = notebook.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    assert 0 < len(json.dumps(widgets)) < 1_500_000, len(json.dumps(widgets))
    marker = execute.OUTPUT_TRUNCATED.split("{")[0]
    for cell in notebook.cells[:3]:
        notes = [o.get("text", "") for o in cell.outputs if o.get("name") == "stderr"]
        assert any(marker in note for note in notes), cell.outputs
    assert execute.WIDGETS_CUT in "".join(o.get("text", "") for o in notebook.cells[0].outputs)
    assert len(json.dumps(notebook.cells[2].outputs)) < 1_100_000
    assert notebook.cells[3].outputs[0]["text"] == "after\n"


@pytest.mark.slow   # a real kernel (~5 s)
def test_the_notebooks_cells_together_keep_at_most_the_notebook_cap():
    """Each cell kept its 1 MB: a notebook of many cells grew without end (and the parent reads it back)."""
    notebook = new_notebook(cells=[new_code_cell("print('x' * 900_000)") for _ in range(4)]
                            + [new_code_cell("print('after')")],
                            metadata={"kernelspec": {"name": "python3", "language": "python",
                                                     "display_name": "Python 3"}})
    step = execute.SandboxedExecute(timeout=60, kernel_name="python3", max_output_bytes=1_000_000,
                                    max_notebook_output_bytes=2_500_000)
    notebook, _ = step.preprocess(notebook, {"metadata": {"path": "."}})
    texts = ["".join(o.get("text", "") for o in cell.outputs) for cell in notebook.cells]
    assert sum(len(text) for text in texts) < 2_500_000 + 5 * 500
    assert [len(text) > 800_000 for text in texts] == [True, True, False, False, False]
    whole = execute.NOTEBOOK_CUT.format(limit=2_500_000)
    assert all(whole in text for text in texts[2:]) and "after" not in texts[4]
