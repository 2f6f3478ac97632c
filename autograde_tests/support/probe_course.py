"""A tiny throw-away course for the grading tests: a `probe` assignment and a `probe_other` one.

`probe` has a plain exercise (`scale`, 2 points) and a distributed one (`ring_pass`, 1 point), so every
robustness and integrity case can be one student of one class run, independent of the chapters.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from course_lib.grading.settings import CODE_ROOT, read_settings

SUPPORT = Path(__file__).resolve().parent
COURSE = read_settings(CODE_ROOT)
# What a grading run of the probe class is given: the course's settings, with the probe's hidden checks
# beside the course's and the probe's registry.
PROBE_SETTINGS = replace(COURSE, registry=SUPPORT / "probe_registry.py",
                         hidden_checks=(*COURSE.hidden_checks, SUPPORT / "hidden_checks"))

KERNELSPEC = {"name": "distributed-course", "display_name": "Python 3 (distributed course)",
              "language": "python"}

SCALE_SOLUTION = "def scale(values, factor):\n    return [v * factor for v in values]\n"
RING_SOLUTION = """def ring_pass(rank, world_size, value):
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    outgoing, incoming = torch.tensor([value]), torch.zeros(1)
    request = dist.isend(outgoing, right)
    dist.recv(incoming, left)
    request.wait()
    return float(incoming[0])
"""


def _meta(grade_id: str, *, solution=False, grade=False, locked=False, points=0) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": 3,
            "solution": solution, "task": False}
    if grade:
        meta["points"] = points
    return {"nbgrader": meta}


def _solution(grade_id: str, answer: str):
    return new_code_cell("### BEGIN SOLUTION\n" + answer + "### END SOLUTION",
                         metadata=_meta(grade_id, solution=True))


def probe_notebook() -> nbformat.NotebookNode:
    cells = [
        new_markdown_cell("# Probe\nA plain exercise and a distributed one."),
        new_code_cell("import torch\nimport torch.distributed as dist\n"
                      "from course_lib.real import run_ranks", metadata=_meta("setup", locked=True)),
        _solution("scale", SCALE_SOLUTION),
        new_code_cell("from course_lib.grading import instructor_checks\nassert callable(scale)\n"
                      "### BEGIN HIDDEN TESTS\ninstructor_checks('probe').check_scale(scale)\n"
                      "### END HIDDEN TESTS",
                      metadata=_meta("test_scale", grade=True, locked=True, points=2)),
        _solution("ring_pass", RING_SOLUTION),
        new_code_cell("from course_lib.grading import instructor_checks\n"
                      "instructor_checks('probe').check_ring_pass(ring_pass)",
                      metadata=_meta("test_ring_pass", grade=True, locked=True, points=1)),
    ]
    return new_notebook(cells=cells, metadata={"kernelspec": KERNELSPEC})


def other_notebook() -> nbformat.NotebookNode:
    cells = [_solution("double", "def double(x):\n    return 2 * x\n"),
             new_code_cell("assert double(2) == 4", metadata=_meta("test_double", grade=True, locked=True,
                                                                 points=1))]
    return new_notebook(cells=cells, metadata={"kernelspec": KERNELSPEC})


def build(root: Path) -> Path:
    """solutions/ and their nbgrader releases in notebooks/ under root; returns root."""
    for name, notebook in (("probe", probe_notebook()), ("probe_other", other_notebook())):
        folder = root / "solutions" / name
        folder.mkdir(parents=True)
        nbformat.write(notebook, folder / f"{name}.ipynb")
        command = [sys.executable, "-m", "nbgrader", "generate_assignment", name, "--no-db", "--force",
                   f"--CourseDirectory.root={root}", "--CourseDirectory.source_directory=solutions",
                   "--CourseDirectory.release_directory=notebooks", "--log-level=WARN"]
        subprocess.run(command, cwd=root, check=True, capture_output=True, timeout=120)
    return root


def release(root: Path, name: str = "probe") -> nbformat.NotebookNode:
    return nbformat.read(root / "notebooks" / name / f"{name}.ipynb", as_version=4)
