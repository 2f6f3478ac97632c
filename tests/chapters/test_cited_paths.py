"""Every file path a notebook in solutions/ cites is either in the repository or public: no path on a
developer's machine (/work/..., /root/..., /home/...), no repository path that does not exist.

A path counts as cited when it stands in a markdown cell or a code cell. Paths the student makes or the
course writes at run time (a site's own slurm/site.sh, a job's runs/ folder) are listed below with why.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "solutions").glob("*/*.ipynb"))
# Roots of paths that only exist on somebody's machine: a notebook that names one cites a private file.
PRIVATE = re.compile(r"(?<![\w.:/~-])/(?:work|root|home|Users|mnt|scratch|private|notes)/[\w.@+-][\w./@+-]*")
# The repository's own top folders: a path under one of them must exist in this checkout.
TOP = ("course_lib", "slurm", "tests", "docs", "tools", "instructor", "autograde_tests", "solutions",
       "notebooks", "benchmarks")
REPOSITORY = re.compile(r"(?<![\w./-])((?:" + "|".join(TOP) + r")/[\w./-]*[\w/])")
MADE_AT_RUN_TIME = {
    "slurm/site.sh": "a site's own settings, copied from slurm/site.example.sh (docs/cluster.md)",
}


def cell_texts(notebook: Path) -> list[tuple[int, str]]:
    cells = json.loads(notebook.read_text())["cells"]
    return [(index, "".join(cell["source"])) for index, cell in enumerate(cells)]


def without_urls(text: str) -> str:
    """The text with every URL (and the host-relative part of a bare github.com/... address) removed."""
    text = re.sub(r"https?://\S+", " ", text)
    return re.sub(r"\b[\w-]+(?:\.[\w-]+)+/\S*", " ", text)     # docs.nvidia.com/..., github.com/...


def cited_problems(notebook: Path) -> list[str]:
    problems = []
    for index, text in cell_texts(notebook):
        text = without_urls(text)
        for path in PRIVATE.findall(text):
            problems.append(f"cell {index}: {path} is a path on somebody's machine, not a public source")
        for path in REPOSITORY.findall(text):
            if path in MADE_AT_RUN_TIME or (ROOT / path).exists():
                continue
            problems.append(f"cell {index}: {path} is not in the repository")
    return problems


def test_there_are_solution_notebooks_to_check():
    assert len(NOTEBOOKS) >= 12


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[n.parent.name for n in NOTEBOOKS])
def test_every_path_a_notebook_cites_is_in_the_repository_or_public(notebook):
    assert cited_problems(notebook) == []


def test_the_check_finds_a_private_path_and_a_missing_repository_path(tmp_path):
    notebook = tmp_path / "nb.ipynb"
    cells = [{"cell_type": "markdown", "source": ["as shown (`/work/notes/spikes.md`, section 3)"]},
             {"cell_type": "code", "source": ["# see course_lib/dist/not_there.py and /home/me/x.txt\n"]},
             {"cell_type": "markdown", "source": ["fine: `course_lib/real/cluster/preemption.py`, "
                                                  "https://github.com/pytorch/pytorch/blob/main/torch/x.py, "
                                                  "github.com/pytorch/torchtitan/tree/main/docs/x.md"]}]
    notebook.write_text(json.dumps({"cells": cells}))
    problems = cited_problems(notebook)
    assert [p.split(":")[0] for p in problems] == ["cell 0", "cell 1", "cell 1"], problems
    assert "/work/notes/spikes.md" in problems[0]
    assert any("course_lib/dist/not_there.py" in p for p in problems[1:])
    assert any("/home/me/x.txt" in p for p in problems[1:])
