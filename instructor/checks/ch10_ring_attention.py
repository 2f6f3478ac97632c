"""Hidden checks of chapter 10 (instructor-only): ring attention and the zig-zag layout.

Each part runs the student's ring on real gloo ranks for several world sizes (1 to 8), with chunk
lengths, head dims, heads, batches and dtypes drawn at grading time from a seed taken from os.urandom;
every expected value is computed here, in float64, never by the student's code. Each failure names the
seed. Every run has a timeout, so a deadlock fails with an explanation and never hangs the grader; once
a run has hung, the parts not yet run fail at once instead of hanging again.

Test cells of solutions/10_context_parallel/10_context_parallel.ipynb, their points, and their hidden call:

  grade_id                            points  hidden check
  test_zigzag_positions                  1    check_zigzag_positions_hidden(zigzag_positions)
  test_ring_attention_values             3    check_ring_attention_values_hidden(ring_attention)
  test_ring_attention_causal             3    check_ring_attention_causal_hidden(ring_attention)
  test_ring_attention_zigzag             2    check_ring_attention_zigzag_hidden(ring_attention)
  test_ring_attention_traffic            2    check_ring_attention_traffic_hidden(ring_attention)
  test_ring_attention_skips_masked       2    check_ring_attention_skips_masked_hidden(ring_attention)
  test_ring_attention_stable             2    check_ring_attention_stable_hidden(ring_attention)
                                        --
                                        15

What each demands (every ring part fails if the function raises, hangs, calls a collective or meets the
exercise's refusal: torch's context parallel, its functional collectives, course_lib):
- values: no mask, float64 to 1e-10 and float32 to 1e-5 of attention over the whole sequence, on 1, 2, 3,
  4 and 8 ranks, non-contiguous inputs included (the same runs hold the memory cases, with the mask too,
  whose values the other parts judge);
- causal: the same with causal=True and contiguous chunks (1 to 4 ranks);
- zigzag: causal=True, layout="zigzag", rows in the order of the rank's tokens (1 to 4 ranks);
- traffic: to one ring neighbour only, N-1 chunks of K and V per rank with the mask and without, in both
  layouts, no collective (nor one below torch.distributed's functions); new tensor memory that does not
  grow from 3 to 8 ranks on the same chunk, without the mask, with it, and zig-zag (a rank that keeps every
  block it received holds the whole K and V);
- skips masked: with the causal mask, each rank's FLOPs of products within what the mask leaves (contiguous:
  rank + 1 blocks; zig-zag: (N + 1) / 2), and all its arithmetic (products written with `*` and a sum
  count) within that plus a softmax's elementwise work, judged where the output is right (zig-zag only if
  it is); a large-head case in each layout makes a product written elementwise show;
- stable: scores of about 1e4, float64 and float32, still right and finite.
The expected points of known-wrong submissions: autograde_tests/fixtures/ring_attention/expected_scores.json.
"""

from __future__ import annotations

import random
from dataclasses import replace

from course_lib.grading.attempt.exercise import Exercise
from course_lib.grading.attempt.judge_runner import runs_until_failure
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.attempt.student_function import StudentFunction, as_student_function
from course_lib.grading.checks.ch10_ring_attention.judge import (
    memory_problems,
    right_ranks,
    traffic_problems,
    value_problems,
    work_problems,
)
from course_lib.grading.checks.ch10_ring_attention.ranks import AttentionCase, run_student
from course_lib.grading.checks.ch10_ring_attention.visible import MEMORY_CASE, REFUSAL, zigzag_problems

from ._seeds import fresh_seed

TIMEOUT_S = 30          # per run of one part on one world size: a right ring takes ~2 s on 8 ranks, ~10 busy
POINTS = {"test_zigzag_positions": 1, "test_ring_attention_values": 3, "test_ring_attention_causal": 3,
          "test_ring_attention_zigzag": 2, "test_ring_attention_traffic": 2,
          "test_ring_attention_skips_masked": 2, "test_ring_attention_stable": 2}
# Part -> world sizes, the usual case first so that a wrong ring fails fast; 8 ranks (slow on 2 cores) once.
WORLD_SIZES = {"values": (4, 3, 8, 2, 1), "causal": (4, 3, 2, 1), "zigzag": (4, 3, 2, 1), "stable": (4, 2)}
# The same chunk without the mask, with it and zig-zag: compared from 3 to 8 ranks in the values runs.
MEMORY_CASES = (MEMORY_CASE, replace(MEMORY_CASE, causal=True),
                replace(MEMORY_CASE, causal=True, layout="zigzag"))
MEMORY_INDICES = (3, 4, 5)   # where part_cases puts MEMORY_CASES among the values cases (every world size)
WIDE = (1, 2, 16, 64)        # a causal case whose products dwarf a softmax's elementwise work
_REPORTS: dict = {}     # one submission's runs, shared by its checks (one entry at a time)


def _sizes(rng: random.Random) -> tuple[int, int, int]:
    return rng.randint(1, 2), rng.randint(1, 3), rng.randint(1, 17)    # batch, heads, head_dim


def part_cases(part: str, rng: random.Random) -> list[AttentionCase]:
    """The cases of one part for one world size, their sizes drawn from ``rng``."""
    if part == "values":
        return [AttentionCase(*_with_chunk(rng, rng.randint(1, 9))),
                AttentionCase(*_with_chunk(rng, rng.randint(1, 9)), "float32"),
                AttentionCase(*_with_chunk(rng, rng.randint(2, 7)), strided=True), *MEMORY_CASES]
    if part == "causal":
        return [AttentionCase(*_with_chunk(rng, rng.randint(1, 9)), causal=True),
                AttentionCase(*_with_chunk(rng, rng.randint(2, 9)), "float32", causal=True),
                AttentionCase(*WIDE, causal=True)]
    if part == "zigzag":
        return [AttentionCase(*_with_chunk(rng, 2 * rng.randint(1, 4)), causal=True, layout="zigzag"),
                AttentionCase(*_with_chunk(rng, 2 * rng.randint(1, 4)), "float32", causal=True,
                              layout="zigzag"),
                AttentionCase(*_with_chunk(rng, 2 * rng.randint(1, 3)), causal=True, layout="zigzag",
                              strided=True),
                AttentionCase(*WIDE, causal=True, layout="zigzag")]
    return [AttentionCase(*_with_chunk(rng, rng.randint(2, 6)), logits=1e4),
            AttentionCase(*_with_chunk(rng, rng.randint(2, 6)), "float32", logits=1e4)]


def _with_chunk(rng: random.Random, chunk: int) -> tuple[int, int, int, int]:
    batch, heads, head_dim = _sizes(rng)
    return batch, heads, chunk, head_dim


def _runs(ring_attention, part: str) -> tuple[list, int]:
    """The part's runs of this submission (made once, then shared), and the seed they were drawn from."""
    student = as_student_function(ring_attention, "ring_attention", refusal=REFUSAL)
    key = student.identity()
    if key not in _REPORTS:
        _REPORTS.clear()
        _REPORTS[key] = {"seed": fresh_seed(), "student": student, "hung": None}
    report = _REPORTS[key]
    if part not in report:
        if report["hung"] is not None:   # a hang costs the timeout once, not once per part
            report[part] = [report["hung"]]
        else:
            report[part] = _run_part(student, part, report["seed"])
            report["hung"] = next((run for run in report[part] if run.hung), None)
    return report[part], report["seed"]


def _run_part(student: StudentFunction, part: str, seed: int) -> list:
    rng = random.Random(f"{seed}-{part}")
    tolerant = MEMORY_INDICES[1:] if part == "values" else ()   # the masked memory cases: judged apart
    return runs_until_failure(
        lambda world_size: run_student(student, world_size, part_cases(part, rng), seed, TIMEOUT_S, tolerant),
        WORLD_SIZES[part])


def _fail(problems: list[str], seed: int, what: str) -> None:
    fail_with([f"{p}\n  (hidden test seed {seed})" for p in dict.fromkeys(problems)], what)


def check_ring_attention_values_hidden(ring_attention) -> None:
    """No mask: right rows on 1 to 8 ranks, float32 and float64, non-contiguous inputs included."""
    runs, seed = _runs(ring_attention, "values")
    _fail([p for run in runs for p in value_problems(run, masked=False)], seed,
          "ring_attention gives wrong values on hidden cases")


def check_ring_attention_causal_hidden(ring_attention) -> None:
    """causal=True, contiguous chunks: right rows on 1 to 4 ranks."""
    runs, seed = _runs(ring_attention, "causal")
    _fail([p for run in runs for p in value_problems(run)], seed,
          "ring_attention with causal=True gives wrong values on hidden cases")


def check_ring_attention_zigzag_hidden(ring_attention) -> None:
    """causal=True, layout="zigzag": right rows, in the order of the rank's tokens."""
    runs, seed = _runs(ring_attention, "zigzag")
    _fail([p for run in runs for p in value_problems(run)], seed,
          'ring_attention with causal=True, layout="zigzag" gives wrong values on hidden cases')


def check_ring_attention_traffic_hidden(ring_attention) -> None:
    """Ring neighbours only, N-1 chunks of K and V with or without the mask, in both layouts; memory flat in
    N without the mask, with it and zig-zag."""
    values, seed = _runs(ring_attention, "values")
    causal, _ = _runs(ring_attention, "causal")
    zigzag, _ = _runs(ring_attention, "zigzag")
    zigzag = [run for run in zigzag if run.completed]    # a zig-zag that fails loses the zig-zag part
    problems = [p for run in values + causal + zigzag for p in traffic_problems(run)]
    problems += [p for index in MEMORY_INDICES for p in memory_problems(values, index)]
    _fail(problems, seed, "ring_attention's traffic or memory is not a ring's on hidden cases")


def check_ring_attention_skips_masked_hidden(ring_attention) -> None:
    """With the causal mask, no rank computes more than the mask leaves (zig-zag judged where it is right)."""
    causal, seed = _runs(ring_attention, "causal")
    zigzag, _ = _runs(ring_attention, "zigzag")
    right = [run for run in zigzag
             if run.completed and all(all(right_ranks(run, i)) for i in range(len(run.cases)))]
    problems = [p for run in causal + right for p in work_problems(run)]
    _fail(problems, seed, "ring_attention computes blocks the causal mask hides, on hidden cases")


def check_ring_attention_stable_hidden(ring_attention) -> None:
    """Scores of about 1e4 in float64 and float32: finite, and right."""
    runs, seed = _runs(ring_attention, "stable")
    _fail([p for run in runs for p in value_problems(run)], seed,
          "ring_attention is not stable for large scores on hidden cases")


def check_zigzag_positions_hidden(zigzag_positions) -> None:
    """The zig-zag positions on drawn layouts (1 to 8 ranks), ValueError where it cannot split or a rank is
    out of range."""
    seed = fresh_seed()
    rng = random.Random(seed)
    calls = []
    for world_size in (1, 2, 3, 5, 8):
        seq_len = 2 * world_size * rng.randint(1, 4)
        ranks = sorted({0, world_size - 1, rng.randrange(world_size)})
        calls += [(seq_len, world_size, rank) for rank in ranks]
    bad = [(2 * 3 * rng.randint(1, 3) + 1, 3, 0), (8, 2, 2), (8, 2, -1)]
    _fail(zigzag_problems(zigzag_positions, calls, bad), seed, "zigzag_positions is wrong on hidden cases")


EXERCISE_CELLS = ("zigzag_positions", "ring_attention")


EXERCISE = Exercise(
    "ch10_ring_attention", "10_context_parallel", answers=("zigzag_positions", "ring_attention"),
    points=POINTS, fixtures="ring_attention", refusals=(REFUSAL,))
# grade_id -> (its hidden check, the answers the check is given): the rows instructor/registry.py collects
ROWS = {
    "test_zigzag_positions": (check_zigzag_positions_hidden, ("zigzag_positions",)),
    "test_ring_attention_values": (check_ring_attention_values_hidden, ("ring_attention",)),
    "test_ring_attention_causal": (check_ring_attention_causal_hidden, ("ring_attention",)),
    "test_ring_attention_zigzag": (check_ring_attention_zigzag_hidden, ("ring_attention",)),
    "test_ring_attention_traffic": (check_ring_attention_traffic_hidden, ("ring_attention",)),
    "test_ring_attention_skips_masked": (check_ring_attention_skips_masked_hidden, ("ring_attention",)),
    "test_ring_attention_stable": (check_ring_attention_stable_hidden, ("ring_attention",)),
}
