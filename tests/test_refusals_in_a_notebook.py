"""In a real kernel, a visible check says what the grader will say: a shortcut through course_lib is
refused whether it runs when the check calls the answer or when the answer's cell ran (work done at
definition time), and an honest answer that leans on the notebook's own imports passes."""

from __future__ import annotations

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tests.support.notebooks import NotebookFailed, code_outputs_text, execute_notebook

pytestmark = pytest.mark.slow

LESSON = ("import math\nfrom math import ceil\n"
          "from course_lib.grading.checks.ch02_prediction.visible import check_gloo_prediction")
HONEST = """def predict_gloo_all_reduce(nbytes, world_size, latency, bandwidth, segment_bytes=2**20):
    if world_size == 1:
        return 0.0
    segments = max(ceil(nbytes / segment_bytes), 2 * world_size)
    segments = ceil(segments / world_size) * world_size
    messages = segments // world_size * (world_size - 1)
    one = latency + nbytes / segments / bandwidth
    first = min(messages, 2)
    return 2 * (first * one + (messages - first) * max(nbytes / segments / bandwidth, one / 2))
"""
AT_CALL = """from course_lib.sim import Link, collective_time
def predict_gloo_all_reduce(nbytes, world_size, latency, bandwidth, segment_bytes=2**20):
    return collective_time("all_reduce", nbytes, world_size, Link(latency, bandwidth), "ring",
                           segment_bytes=segment_bytes, in_flight=2)
"""
AT_DEFINITION = """import sys
_SIM = sys.modules["course_lib.sim"]
_TABLE = {n: _SIM.collective_time("all_reduce", 4096, n, _SIM.Link(50e-6, 1e9), "ring", segment_bytes=2**20,
                                  in_flight=2) for n in (1, 2)}
def predict_gloo_all_reduce(nbytes, world_size, latency, bandwidth, segment_bytes=2**20):
    return _TABLE[world_size]
"""


def _run(tmp_path, answer: str):
    notebook = new_notebook(cells=[new_code_cell(LESSON), new_code_cell(answer),
                                   new_code_cell("check_gloo_prediction(predict_gloo_all_reduce)")],
                            metadata={"kernelspec": {"name": "distributed-course", "language": "python",
                                                     "display_name": "course"}})
    path = tmp_path / "probe.ipynb"
    nbformat.write(notebook, path)
    return execute_notebook(path, cell_timeout=120, total_timeout=300)


def test_an_honest_answer_using_the_notebooks_imports_passes(tmp_path):
    executed, _ = _run(tmp_path, HONEST)
    assert "right on 4 visible cases" in code_outputs_text(executed)


@pytest.mark.parametrize("answer", [AT_CALL, AT_DEFINITION], ids=["when-called", "at-definition"])
def test_a_course_lib_shortcut_is_refused_in_the_notebook(tmp_path, answer):
    with pytest.raises(NotebookFailed, match="RefusedCodeError") as failed:
        _run(tmp_path, answer)
    assert "course_lib" in str(failed.value) and "refuses" in str(failed.value)
