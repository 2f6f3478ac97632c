"""Chapter 10's judge on made-up runs (no ranks): values, traffic and its drawing, memory, skipped work;
and the points, registry and refusal the notebook and the hidden checks share."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
import torch

from course_lib.grading.attempt.rank_attempt import RankRun
from course_lib.grading.attempt.refusals import prepare
from course_lib.grading.checks.ch10_ring_attention import visible
from course_lib.grading.checks.ch10_ring_attention.judge import (
    expected_rows,
    kv_bytes,
    memory_problems,
    traffic_problems,
    value_problems,
    work_bound,
    work_problems,
)
from course_lib.grading.checks.ch10_ring_attention.ranks import AttentionCase, AttentionOutcome, rank_inputs

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = ROOT / "solutions" / "10_context_parallel" / "10_context_parallel.ipynb"
FIXTURES = ROOT / "autograde_tests" / "fixtures" / "ring_attention"
EXPECTED = json.loads((FIXTURES / "expected_scores.json").read_text())
CASE = AttentionCase(1, 2, 4, 8)


def _ring_events(case, n, rank, mask_skips_sends=False):
    if n == 1 or (mask_skips_sends and rank == n - 1):
        return []
    return [("isend", (rank + 1) % n, kv_bytes(case)), ("irecv", (rank - 1) % n, kv_bytes(case))] * (n - 1)


def _run(case=CASE, n=4, seed=5, out=None, events=None, flops=None, peak=1000, dispatched=()) -> RankRun:
    probe = RankRun(n, cases=(case,), seed=seed)
    rows = expected_rows(probe, 0) if out is None else out
    dtype = torch.float64 if case.dtype == "float64" else torch.float32
    outcomes = tuple((AttentionOutcome(rows[r].to(dtype), "Tensor",
                                       _ring_events(case, n, r) if events is None else events(r),
                                       list(dispatched), flops[r] if flops else 0, peak),) for r in range(n))
    return RankRun(n, per_rank=outcomes, cases=(case,), seed=seed)


def test_right_rows_pass_and_a_wrong_row_names_its_position():
    assert value_problems(_run()) == []
    rows = expected_rows(RankRun(4, cases=(CASE,), seed=5), 0)
    rows[2] = rows[2].clone()
    rows[2][0, 1, 3] += 0.1
    [problem] = value_problems(_run(out=rows))
    assert problem.startswith("rank 2,") and "its row 3, the query at sequence position 11" in problem


def test_overflow_and_wrong_shape_are_named():
    rows = expected_rows(RankRun(4, cases=(CASE,), seed=5), 0)
    rows = [row.clone() for row in rows]
    rows[0][0, 0, 0, 0] = float("nan")
    rows[1] = rows[1][:, :, :2]
    problems = value_problems(_run(out=rows))
    assert "inf or NaN" in problems[0] and "expected shape (1, 2, 4, 8)" in problems[1]


def test_zigzag_rows_follow_the_layout():
    case = AttentionCase(1, 1, 4, 2, causal=True, layout="zigzag")
    q = rank_inputs(case, 3, 0, 1, 2)[0]
    assert q.shape == (1, 1, 4, 2)
    probe = RankRun(2, cases=(case,), seed=3)
    assert value_problems(_run(case, 2, 3, out=expected_rows(probe, 0))) == []
    swapped = [torch.cat(r.chunk(2, dim=2)[::-1], dim=2) for r in expected_rows(probe, 0)]
    assert len(value_problems(_run(case, 2, 3, out=swapped))) == 2


def test_a_ring_passes_and_other_patterns_are_drawn_beside_a_ring():
    assert traffic_problems(_run()) == []
    left = _run(events=lambda r: [("isend", (r - 1) % 4, kv_bytes(CASE)),
                                  ("irecv", (r + 1) % 4, kv_bytes(CASE))] * 3)
    assert traffic_problems(left) == []          # a ring the other way round is a ring
    star = _run(events=lambda r: [("isend", p, kv_bytes(CASE)) for p in range(4) if p != r])
    problems = traffic_problems(star)
    assert "one neighbour" in problems[0]
    assert problems[-1].startswith("bytes sent (row: sender), yours | a ring's")
    assert f"{3 * kv_bytes(CASE)}" in problems[-1]


def test_skipping_a_send_under_the_mask_and_collectives_are_refused():
    causal = AttentionCase(1, 2, 4, 8, causal=True)
    skipped = _run(causal, events=lambda r: _ring_events(causal, 4, r, mask_skips_sends=True))
    assert any("whether or not the mask" in p for p in traffic_problems(skipped))
    gathered = _run(events=lambda r: [("all_gather", None, 4 * kv_bytes(CASE))])
    assert any("called all_gather" in p for p in traffic_problems(gathered))
    below = _run(dispatched=["_c10d_functional.all_gather_into_tensor"])
    assert any("below torch.distributed" in p for p in traffic_problems(below))


def test_memory_may_not_grow_with_the_ranks():
    chunk = kv_bytes(visible.MEMORY_CASE) // 2
    flat = [_run(visible.MEMORY_CASE, n, peak=40 * chunk) for n in (2, 3, 8)]
    assert memory_problems(flat, 0) == []
    growing = [_run(visible.MEMORY_CASE, n, peak=(4 + 2 * n) * chunk) for n in (2, 3, 8)]
    [problem] = memory_problems(growing, 0)
    assert "grew from" in problem and "on 3 ranks" in problem      # 2 ranks have no second step


def test_work_bounds_and_wrong_outputs_do_not_count():
    causal = AttentionCase(1, 2, 4, 8, causal=True)
    block = 4 * 2 * 16 * 8
    assert work_bound(causal, 0, 4) == pytest.approx(1.05 * block)
    zigzag = AttentionCase(1, 2, 4, 8, causal=True, layout="zigzag")
    assert work_bound(zigzag, 3, 4) == pytest.approx(1.05 * 2.5 * block)
    assert work_problems(_run(causal, flops=[block * (r + 1) for r in range(4)])) == []
    problems = work_problems(_run(causal, flops=[4 * block] * 4))     # every rank did every block
    assert len(problems) == 3 and "rank 0" in problems[0] and "skip the blocks" in problems[0]
    rows = [r.clone() + 1 for r in expected_rows(RankRun(4, cases=(causal,), seed=5), 0)]
    assert "does not count" in work_problems(_run(causal, out=rows, flops=[0] * 4))[0]


def test_points_match_the_notebook_the_registry_and_the_fixture_table():
    from course_lib.grading import instructor_checks
    from instructor.registry import CHECKS

    # the chapter's two exercises: the forward (with its overlap) and the backward
    points = {name: value for exercise in ("ch10_ring_attention", "ch10_ring_backward")
              for name, value in instructor_checks(exercise).POINTS.items()}
    cells = nbformat.read(str(SOLUTION), as_version=4).cells
    graded = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
              for c in cells if c.metadata.get("nbgrader", {}).get("grade")}
    assert graded == points == EXPECTED["max_points"] == EXPECTED["solution"]
    assert {gid for (chapter, gid) in CHECKS if chapter == "10_context_parallel"} == set(graded)
    assert sorted(p.stem for p in FIXTURES.glob("*.py")) == sorted(EXPECTED["fixtures"])
    text = " ".join(" ".join(c.source for c in cells).split())
    for phrase in ("(17 points)", "zig-zag positions (1)", "without a mask (3)", "contiguous chunks (3)",
                   "zig-zag layout (2)", "traffic and memory (2)", "skipped work (2", "large scores (2)",
                   # the backward's paragraph: ch10_ring_backward's points less the forward's overlap
                   "(12 points)", "dQ (2)", "dK, dV (3)", "traffic (2)", "work (1", "Overlap (2)",
                   "Memory (2)"):
        assert phrase in text, phrase
    assert sum(instructor_checks("ch10_ring_backward").POINTS.values()) - 2 == 12


def test_the_refusal_is_worked_out_and_allows_the_recorder():
    armed = prepare(visible.REFUSAL)
    refused = set(armed.refused_files.values())
    assert "torch.distributed.tensor.experimental._context_parallel" in refused
    assert "torch.distributed._functional_collectives" in refused
    assert visible.REFUSAL.allowed == ("real/record/compute_log.py",)
