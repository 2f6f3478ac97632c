"""Feedback names the course's paths relative to the course (issue 58): a traceback through course_lib, a
file the student's code wrote, the grading run's scratch folder; never the instructor's checkout."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook, new_output

from course_lib.grading.autograder import course_paths

CHECKOUT = Path("/home/prof/distributed-course")
RUN = Path("/tmp/course-grading-abc123/course-02_collectives-ada")


def _graded() -> nbformat.NotebookNode:
    folder = RUN / "autograded" / "ada" / "02_collectives"
    traceback = [f"File {CHECKOUT}/course_lib/real/ranks.py:88, in run_ranks(fn, world_size)",
                 f"File {CHECKOUT}/.venv/lib/python3.11/site-packages/torch/distributed/c10d.py:1, in send",
                 f"FileNotFoundError: {folder}/results.txt"]
    cell = new_code_cell("ring()", outputs=[
        new_output("stream", name="stdout", text=f"saved to {folder}/checkpoints/step-3\nin {folder}\n"),
        new_output("error", ename="FileNotFoundError", evalue=f"{RUN}/home/x and {CHECKOUT}",
                   traceback=traceback),
        new_output("display_data", data={"text/plain": f"{CHECKOUT}/course_lib", "image/png": "AAAA"}),
    ])
    return new_notebook(cells=[cell, nbformat.v4.new_markdown_cell(f"{CHECKOUT} stays in prose")])


def test_every_output_names_paths_relative_to_the_course():
    notebook = _graded()
    course_paths.make_relative(notebook, course_paths.replacements(CHECKOUT, RUN, "ada", "02_collectives"))
    stream, error, display = notebook.cells[0].outputs
    assert stream.text == "saved to checkpoints/step-3\nin .\n"
    assert error.traceback == ["File course_lib/real/ranks.py:88, in run_ranks(fn, world_size)",
                               "File .venv/lib/python3.11/site-packages/torch/distributed/c10d.py:1, in send",
                               "FileNotFoundError: results.txt"]
    assert error.evalue == "home/x and ."
    assert display.data == {"text/plain": "course_lib", "image/png": "AAAA"}
    assert str(CHECKOUT) in notebook.cells[1].source   # only outputs are rewritten
    assert "/tmp/" not in nbformat.writes(notebook) and "/home/prof" not in str(notebook.cells[0])


def test_a_folder_whose_name_only_starts_like_the_checkout_is_left_alone():
    notebook = new_notebook(cells=[new_code_cell("", outputs=[
        new_output("stream", name="stdout", text=f"{CHECKOUT}2/data {CHECKOUT}.old {CHECKOUT}: done")])])
    course_paths.make_relative(notebook, course_paths.replacements(CHECKOUT, RUN, "ada", "02_collectives"))
    assert notebook.cells[0].outputs[0].text == f"{CHECKOUT}2/data {CHECKOUT}.old .: done"
