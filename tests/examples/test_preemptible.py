"""course_lib/examples/preemptible.py resumes exactly from its newest DCP checkpoint, on any number of ranks.

A run stopped after 4 steps and started again for 8 ends where an uninterrupted 8-step run ends (bit for
bit on the same ranks, to rounding on another number), and a folder holding only an unfinished save (no
.metadata) is not a checkpoint. The signal and the requeue are tests/slurm/test_requeue.py's.
"""

from __future__ import annotations

import pytest

from course_lib.examples import preemptible
from course_lib.real import run_ranks

pytestmark = pytest.mark.slow


def test_a_stopped_run_resumes_where_it_stood_on_the_same_and_on_fewer_ranks(tmp_path):
    whole = run_ranks(preemptible.main, 2, 8, 4, 0, tmp_path / "whole", timeout=120)[0]
    first = run_ranks(preemptible.main, 2, 4, 4, 0, tmp_path / "resumed", timeout=120)[0]
    (tmp_path / "resumed" / "step-000006").mkdir()                  # a save that never wrote its .metadata
    resumed = run_ranks(preemptible.main, 2, 8, 4, 0, tmp_path / "resumed", timeout=120)[0]
    assert (first["stopped_at"], resumed["resumed_from"], resumed["stopped_at"]) == (4, 4, 8)
    assert resumed["final_loss"] == whole["final_loss"]
    run_ranks(preemptible.main, 2, 4, 4, 0, tmp_path / "resharded", timeout=120)
    on_one = run_ranks(preemptible.main, 1, 8, 4, 0, tmp_path / "resharded", timeout=120)[0]
    assert on_one["resumed_from"] == 4
    assert on_one["final_loss"] == pytest.approx(whole["final_loss"], rel=1e-5)


def test_without_a_folder_it_says_how_to_give_one(monkeypatch):
    monkeypatch.delenv("COURSE_RUN_DIR", raising=False)
    with pytest.raises(ValueError, match="checkpoint folder"):
        preemptible.default_folder()
