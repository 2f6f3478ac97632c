"""The visible checks of chapter 10's ring-attention exercise, as the notebook calls them.

Each ``check_*`` runs the student's answer on real ranks (``ch10_ring_attention_ranks``) or in an
isolated child, asks the judge (``ch10_ring_attention_judge``) what is wrong, and raises one
AssertionError listing it, or prints what passed. ``REFUSAL`` says what the answer may not use.
"""

from __future__ import annotations

from course_lib.grading.attempt.isolation import IsolatedCallError, map_isolated
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch10_ring_attention.judge import (
    kv_bytes,
    memory_problems,
    right_ranks,
    traffic_problems,
    value_problems,
    work_problems,
)
from course_lib.grading.checks.ch10_ring_attention.ranks import AttentionCase, run_student
from course_lib.real.chapter_runs.sequence_split import layout_positions

__all__ = ["REFUSAL", "check_ring_attention", "check_ring_attention_causal",
           "check_ring_attention_skips_masked", "check_ring_attention_stable", "check_ring_attention_traffic",
           "check_ring_attention_zigzag", "check_zigzag_positions"]

REFUSAL = Refusal(
    "your ring attention",
    modules=("torch.distributed.tensor.experimental._context_parallel",
             "torch.distributed.tensor.experimental._attention",
             "torch.distributed._functional_collectives"),
    why=("the exercise is to write ring attention yourself: torch's context parallel would pass the keys "
         "and values round and merge the partial results for you, and its functional collectives are "
         "collectives, which this exercise forbids"),
    allowed=("real/record/compute_log.py",))   # the recorder of the work the answer does (a dispatch mode)
VISIBLE_TIMEOUT_S = 20
SEED = 2024
WORLD_SIZE = 4
MEMORY_CASE = AttentionCase(1, 2, 8, 32)        # K and V chunks larger than the scores: memory shows them
MEMORY_WORLD_SIZES = (3, 6)                     # a ring holds as much on both; the whole K and V doubles


def _student(candidate):
    return as_student_function(candidate, "ring_attention", refusal=REFUSAL)


def _run(candidate, cases, world_size: int = WORLD_SIZE):
    return run_student(_student(candidate), world_size, cases, SEED, VISIBLE_TIMEOUT_S)


def check_ring_attention(ring_attention) -> None:
    """Visible test: without a mask, every rank's rows equal attention over the whole sequence."""
    cases = [AttentionCase(1, 2, 4, 8), AttentionCase(2, 3, 3, 5, "float32"),
             AttentionCase(1, 2, 5, 4, strided=True)]
    fail_with(value_problems(_run(ring_attention, cases)), "ring_attention gave wrong values")
    print(f"ring_attention: equals attention over the whole sequence on {WORLD_SIZE} ranks (float64 to "
          "1e-10, float32 to 1e-5), non-contiguous inputs included")


def check_ring_attention_causal(ring_attention) -> None:
    """Visible test: with causal=True and contiguous chunks, every rank's rows are right."""
    cases = [AttentionCase(1, 2, 4, 8, causal=True), AttentionCase(2, 1, 3, 6, "float32", causal=True)]
    fail_with(value_problems(_run(ring_attention, cases)),
              "ring_attention with causal=True gave wrong values")
    print(f"ring_attention(causal=True): right on {WORLD_SIZE} ranks, contiguous chunks")


def check_ring_attention_zigzag(ring_attention) -> None:
    """Visible test: with causal=True, layout="zigzag", every rank's rows are right, in its tokens' order."""
    cases = [AttentionCase(1, 2, 4, 8, causal=True, layout="zigzag"),
             AttentionCase(1, 3, 6, 4, "float32", causal=True, layout="zigzag")]
    fail_with(value_problems(_run(ring_attention, cases)),
              'ring_attention with causal=True, layout="zigzag" gave wrong values')
    print(f'ring_attention(causal=True, layout="zigzag"): right on {WORLD_SIZE} ranks')


def check_ring_attention_traffic(ring_attention) -> None:
    """Visible test: N-1 chunks of K and V to one neighbour, mask or not; memory that does not grow with N."""
    causal = AttentionCase(1, 2, 4, 8, causal=True)
    runs = [_run(ring_attention, [MEMORY_CASE, causal], size) for size in MEMORY_WORLD_SIZES]
    problems = [p for run in runs for p in traffic_problems(run)] + memory_problems(runs, 0)
    fail_with(problems, "ring_attention's traffic or memory is not a ring's", limit=3)
    peaks = [max(o.peak for o in run.outcomes[0]) for run in runs]
    fewest, most = MEMORY_WORLD_SIZES
    print(f"ring_attention traffic: each rank sent N-1 chunks of K and V to one neighbour ({fewest - 1} x "
          f"{kv_bytes(MEMORY_CASE)} bytes on {fewest} ranks), with the mask and without; at most {peaks[0]} "
          f"bytes of new tensors held on {fewest} ranks, {peaks[1]} on {most}")


def _blocks(run, index: int) -> list[float]:
    case = run.cases[index]
    block = 4 * case.batch * case.heads * case.chunk ** 2 * case.head_dim
    return [outcome.flops / block for outcome in run.outcomes[index]]


def check_ring_attention_skips_masked(ring_attention) -> None:
    """Visible test: with the causal mask, no rank computes blocks the mask hides entirely (both layouts)."""
    contiguous = _run(ring_attention, [AttentionCase(1, 2, 4, 8, causal=True)])
    zigzag = _run(ring_attention, [AttentionCase(1, 2, 4, 8, causal=True, layout="zigzag")])
    problems = work_problems(contiguous)
    zigzag_done = zigzag.completed and all(right_ranks(zigzag, 0))
    if zigzag_done:
        problems += work_problems(zigzag)
    fail_with(problems, "ring_attention computes blocks the causal mask hides")
    print("ring_attention skips masked blocks: work per rank, in full chunk x chunk blocks: contiguous "
          f"{[round(b, 2) for b in _blocks(contiguous, 0)]}"
          + (f", zig-zag {[round(b, 2) for b in _blocks(zigzag, 0)]}" if zigzag_done
             else " (zig-zag not judged: it does not run right yet)"))


def check_ring_attention_stable(ring_attention) -> None:
    """Visible test: scores of about 1e4 neither overflow nor lose the right answer."""
    cases = [AttentionCase(1, 2, 4, 8, logits=1e4), AttentionCase(1, 2, 4, 8, "float32", logits=1e4)]
    fail_with(value_problems(_run(ring_attention, cases)), "ring_attention is not stable for large scores")
    print(f"ring_attention: right with scores of about 1e4 on {WORLD_SIZE} ranks, float64 and float32")


ZIGZAG_CALLS = [(16, 4, 0), (16, 4, 3), (12, 3, 1), (2, 1, 0)]
ZIGZAG_BAD = [(10, 4, 0), (16, 4, 4), (16, 0, 0)]


def zigzag_problems(zigzag_positions, calls, bad_calls) -> list[str]:
    """Positions equal the zig-zag layout's on ``calls``; each of ``bad_calls`` raises ValueError."""
    try:
        answers = map_isolated(zigzag_positions, calls, "zigzag_positions", refusal=REFUSAL)
    except IsolatedCallError as error:
        return [f"zigzag_positions raised on {calls}: {error}"]
    problems = []
    for args, got in zip(calls, answers, strict=True):
        want = layout_positions(*args, layout="zigzag")
        if not isinstance(got, (list, tuple)) or [int(x) for x in got] != want:
            problems.append(f"zigzag_positions{args} returned {got!r}; expected {want}")
    for args in bad_calls:
        try:
            got = map_isolated(zigzag_positions, [args], "zigzag_positions", refusal=REFUSAL)[0]
        except IsolatedCallError as error:
            if not str(error).startswith("ValueError"):
                problems.append(f"zigzag_positions{args} should raise ValueError, raised: {error}")
        else:
            problems.append(f"zigzag_positions{args} returned {got!r}; it should raise ValueError")
    return problems


def check_zigzag_positions(zigzag_positions) -> None:
    """Visible test: the zig-zag layout's positions on a few sizes, and ValueError where it cannot split."""
    fail_with(zigzag_problems(zigzag_positions, ZIGZAG_CALLS, ZIGZAG_BAD), "zigzag_positions is wrong")
    print(f"zigzag_positions: right on {len(ZIGZAG_CALLS)} layouts, ValueError on {len(ZIGZAG_BAD)} "
          "impossible ones")
