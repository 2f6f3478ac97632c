"""A notebook's answer is made again from its own cells in the child that runs a visible check: the cell
defining it and the cells of the notebook functions it calls (global names, not attribute names), in a
copy of the notebook's namespace, definitions only."""

from __future__ import annotations

import linecache

from course_lib.grading.attempt.kernel_cells import notebook_cells, redefined


def _cell(namespace: dict, name: str, source: str) -> None:
    """What IPython does for a cell: its lines in linecache under a name no file has, then run."""
    linecache.cache[name] = (len(source), None, source.splitlines(keepends=True), name)
    exec(compile(source, name, "exec"), namespace)


def test_the_answer_is_remade_from_its_cells_with_what_they_compute_at_definition_time():
    notebook: dict = {"__name__": "__main__"}
    _cell(notebook, "/tmp/ipykernel_0/lesson.py", "def nbytes(t):\n    return 0\nSIDE = []\nSIDE.append(1)\n")
    _cell(notebook, "/tmp/ipykernel_0/helper.py", "def helper(x):\n    return x + 1\n")
    _cell(notebook, "/tmp/ipykernel_0/answer.py",
          "CALLS = []\nTABLE = [helper(i) for i in range(3)]\n"
          "def answer(t):\n    CALLS.append(t.nbytes)\n    return helper(TABLE[0])\n")
    notebook["TABLE"] = ["tampered"]                  # the kernel's state after the cell ran
    assert notebook_cells(notebook["answer"], notebook) == ["/tmp/ipykernel_0/helper.py",
                                                            "/tmp/ipykernel_0/answer.py"]
    watched = []
    fresh = redefined(notebook["answer"], "answer", watched.append)
    assert fresh is not notebook["answer"] and fresh.__globals__ is watched[0]
    assert fresh.__globals__["TABLE"] == [1, 2, 3] and notebook["TABLE"] == ["tampered"]
    assert notebook["SIDE"] == [1] and fresh.__globals__["SIDE"] == [1]   # the lesson cell was not rerun


def test_a_function_not_made_in_a_notebook_is_used_as_it_is():
    assert redefined(len, "len") is len
    assert redefined(test_a_function_not_made_in_a_notebook_is_used_as_it_is, "x") \
        is test_a_function_not_made_in_a_notebook_is_used_as_it_is
