"""The judging side of chapter 10's ring-attention checks: what a run of the student's ring got wrong.

Expected rows are recomputed here, in float64, from the seed (``whole_inputs``); nothing the ranks sent is
trusted beyond being compared. Traffic failures come with the student's bytes drawn beside a ring's.
"""

from __future__ import annotations

import torch

from course_lib.grading.attempt.judge_runner import cases_of, failures, judging
from course_lib.grading.attempt.rank_attempt import RankRun
from course_lib.grading.checks.ch10_ring_attention.ranks import (
    DTYPES,
    FORBIDDEN_REASON,
    RAISED,
    AttentionCase,
    whole_inputs,
)
from course_lib.real.chapter_runs.sequence_split import layout_positions

SENDS, RECEIVES = frozenset({"send", "isend"}), frozenset({"recv", "irecv"})
WORK_SLACK = 1.05          # FLOPs allowed above the bound (rounding of odd sizes into pieces)
PER_SCORE = 16             # other arithmetic allowed per score of a computed block (max, exp, sums, mask)
PER_ROW = 8                # ... per element of a row of the output and its sums, per step and once more
MEMORY_SLACK_CHUNKS = 2    # growth of peak memory with the ranks allowed, in chunks of K
MEMORY_FROM_RANKS = 3      # the fewest ranks whose peak memory is compared


def reference_attention(q, k, v, causal: bool) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) [masked]) v in float64, the scores shifted by their row maximum."""
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        length = q.shape[2]
        scores = scores.masked_fill(torch.ones(length, length, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def expected_rows(run: RankRun, index: int) -> list[torch.Tensor]:
    """Each rank's rows of the whole attention, in the order it holds its tokens (float64)."""
    case, n = run.cases[index], run.world_size
    whole = reference_attention(*whole_inputs(case, run.seed, index, n), case.causal)
    return [whole[:, :, layout_positions(n * case.chunk, n, rank, case.layout)] for rank in range(n)]


def _row_problem(case: AttentionCase, rank: int, n: int, out, want: torch.Tensor) -> str | None:
    if out is None:
        return "returned no tensor"
    if tuple(out.shape) != tuple(want.shape) or out.dtype != DTYPES[case.dtype]:
        return (f"returned shape {tuple(out.shape)} and dtype {out.dtype}; expected shape "
                f"{tuple(want.shape)} and dtype {DTYPES[case.dtype]} (those of q)")
    if not bool(torch.isfinite(out).all()):
        return "returned inf or NaN: did an exponential overflow, or a fully masked row divide 0 by 0?"
    error = (out.to(torch.float64) - want).abs()
    if float(error.max()) <= case.tolerance:
        return None
    row = int(error.amax(dim=(0, 1, 3)).argmax())
    position = layout_positions(n * case.chunk, n, rank, case.layout)[row]
    return (f"largest difference {float(error.max()):.3g} (allowed {case.tolerance:g}), worst at its row "
            f"{row}, the query at sequence position {position}")


@judging
def value_problems(run: RankRun, masked: bool | None = None) -> list[str]:
    """Each rank's output against its rows of attention on one process, case by case (only the cases
    with the causal mask, or only those without, when ``masked`` says so)."""
    problems = []
    for index, case, outcomes in cases_of(run):
        if masked is not None and case.causal != masked:
            continue
        for rank, (outcome, want) in enumerate(zip(outcomes, expected_rows(run, index), strict=True)):
            problem = _row_problem(case, rank, run.world_size, outcome.out, want)
            if problem:
                problems.append(f"rank {rank}, {case.describe(run.world_size)}: {problem}")
    return problems


def right_ranks(run: RankRun, index: int) -> list[bool]:
    """Per rank, whether its output in case ``index`` is right."""
    case = run.cases[index]
    pairs = zip(run.outcomes[index], expected_rows(run, index), strict=True)
    return [_row_problem(case, rank, run.world_size, outcome.out, want) is None
            for rank, (outcome, want) in enumerate(pairs)]


def raised(outcomes) -> bool:
    """Whether a rank raised in this case (only a case the run tolerated, see ``run_student``)."""
    return any(outcome.returned.startswith(RAISED) for outcome in outcomes)


def kv_bytes(case: AttentionCase) -> int:
    """Bytes of one rank's chunk of K and of V together."""
    itemsize = torch.empty(0, dtype=DTYPES[case.dtype]).element_size()
    return 2 * case.batch * case.heads * case.chunk * case.head_dim * itemsize


def traffic_drawing(run: RankRun, index: int) -> str:
    """Bytes each rank sent to each rank, the student's beside a ring's (every rank to rank + 1)."""
    n, case = run.world_size, run.cases[index]
    ring = {(r, (r + 1) % n): (n - 1) * kv_bytes(case) for r in range(n)} if n > 1 else {}
    yours: dict = {}
    for rank, outcome in enumerate(run.outcomes[index]):
        for op, peer, nbytes in outcome.events:
            if op not in RECEIVES:
                key = (rank, peer if op in SENDS else op)
                yours[key] = yours.get(key, 0) + nbytes
    width = max(8, len(str(max([*ring.values(), *yours.values(), 0]))) + 2)
    head = "".join(f"{'to ' + str(p):>{width}}" for p in range(n))
    lines = [f"bytes sent (row: sender), yours | a ring's, {case.describe(n)}:",
             f"{'':8}{head}  |{head}"]
    for rank in range(n):
        mine = "".join(f"{yours.get((rank, p), '.')!s:>{width}}" for p in range(n))
        theirs = "".join(f"{ring.get((rank, p), '.')!s:>{width}}" for p in range(n))
        other = sorted({op for (r, op) in yours if r == rank and isinstance(op, str)})
        also = f"   and {', '.join(other)}" if other else ""
        lines.append(f"{'rank ' + str(rank):8}{mine}  |{theirs}{also}")
    return "\n".join(lines)


def _rank_traffic(case, n: int, rank: int, outcome) -> list[str]:
    collectives = sorted({op for op, _, _ in outcome.events if op not in SENDS | RECEIVES})
    problems = [f"called {', '.join(collectives)}; {FORBIDDEN_REASON}"] if collectives else []
    if outcome.dispatched:
        problems.append(f"ran {', '.join(sorted(set(outcome.dispatched)))} (a collective below "
                        f"torch.distributed's functions); {FORBIDDEN_REASON}")
    sends = [(peer, nbytes) for op, peer, nbytes in outcome.events if op in SENDS]
    receives = {peer for op, peer, _ in outcome.events if op in RECEIVES}
    peers = {peer for peer, _ in sends}
    right, left = (rank + 1) % n, (rank - 1) % n
    if n > 1 and not (peers <= {right} and receives <= {left} or peers <= {left} and receives <= {right}):
        problems.append(f"sent to rank(s) {sorted(peers, key=str)} and received from "
                        f"{sorted(receives, key=str)}; in a ring a rank sends only to one neighbour "
                        f"({right} or {left}) and receives only from the other")
    sent, least = sum(nbytes for _, nbytes in sends), (n - 1) * kv_bytes(case)
    most = least + (n - 1) * (8 * case.chunk + 64)      # room for a few positions or a step number
    if not least <= sent <= most:
        problems.append(f"sent {sent} bytes; a ring passes on N-1 = {n - 1} chunks of K and of V, "
                        f"{least} bytes, whether or not the mask lets this rank skip them (the ranks "
                        "after it need them)")
    return problems


@judging
def traffic_problems(run: RankRun) -> list[str]:
    """Point-to-point to ring neighbours only, N-1 chunks of K and V per rank, with the mask or without."""
    problems = []
    for index, case, outcomes in cases_of(run):
        if raised(outcomes):
            continue                  # a tolerated case that raised: the part that owns it judges it
        found = [f"rank {rank}, {case.describe(run.world_size)}: {p}" for rank, outcome in enumerate(outcomes)
                 for p in _rank_traffic(case, run.world_size, rank, outcome)]
        if found:
            problems += found[:2] + [traffic_drawing(run, index)]
    return problems


def memory_problems(runs: list[RankRun], index: int) -> list[str]:
    """Case ``index`` (the same chunk on every world size) must not need more memory on more ranks.

    Compared from 3 ranks on: from the second step a ring holds the chunk it works on and the one
    arriving, and on 2 ranks there is no second step (a rank's own K and V are its inputs, not counted).
    """
    done = [run for run in runs if run.completed and run.world_size >= MEMORY_FROM_RANKS
            and not raised(run.outcomes[index])]
    if len(done) < 2:
        return failures(runs)[:1]
    case = done[0].cases[index]
    grew = memory_growth(done, index)
    if grew is None:
        return []
    (fewest, least), (most, peak) = grew
    whole = most * kv_bytes(case)
    return [f"{case.describe(most)}: the most new tensor memory a rank held grew from {least} bytes "
            f"on {fewest} ranks to {peak} on {most} (the whole K and V of the sequence is {whole} "
            "bytes): "
            "a ring keeps the chunk it works on, the one arriving and a running result, however many ranks "
            "there are; does something get kept for every block?"]


def memory_growth(done: list[RankRun], index: int) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """Case ``index``'s most new tensor memory a rank held, as (ranks, bytes) on the fewest and on the most
    ranks of ``done``, when it grew by more than MEMORY_SLACK_CHUNKS chunks of K (half a block of K and V
    each); None when it did not (the forward's and the backward's memory bound alike)."""
    peaks = {run.world_size: max(o.peak for o in run.outcomes[index]) for run in done}
    fewest, most = min(peaks), max(peaks)
    if peaks[most] <= peaks[fewest] + MEMORY_SLACK_CHUNKS * kv_bytes(done[0].cases[index]) // 2:
        return None
    return (fewest, peaks[fewest]), (most, peaks[most])


def work_bound(case: AttentionCase, rank: int, n: int) -> float:
    """FLOPs of products a rank needs at most under the causal mask, skipping every fully masked block."""
    block = 4 * case.batch * case.heads * case.chunk ** 2 * case.head_dim
    blocks = rank + 1 if case.layout == "contiguous" else (n + 1) / 2
    return WORK_SLACK * blocks * block


def arithmetic_bound(case: AttentionCase, rank: int, n: int) -> float:
    """All the arithmetic a rank needs at most under the causal mask: the products of ``work_bound``, and
    room for the softmax's elementwise work on each computed block's scores and on the output rows at
    every step. A product written as a broadcast multiply and a sum counts as much as ``@``'s FLOPs."""
    scores = case.batch * case.heads * case.chunk ** 2
    rows = case.batch * case.heads * case.chunk * (case.head_dim + 1)
    blocks = work_bound(case, rank, n) / (4 * scores * case.head_dim)
    return work_bound(case, rank, n) + blocks * PER_SCORE * scores + (n + 1) * PER_ROW * rows


def _work_problem(case: AttentionCase, rank: int, n: int, outcome) -> str | None:
    where = f"rank {rank}, {case.describe(n)}"
    if outcome.flops > work_bound(case, rank, n):
        least = int(work_bound(case, rank, n) / WORK_SLACK)
        return (f"{where}: computed {outcome.flops} FLOPs of products; the mask leaves at most {least}: skip "
                "the blocks whose keys all come after this rank's queries")
    if outcome.arithmetic > arithmetic_bound(case, rank, n):
        least = int(work_bound(case, rank, n) / WORK_SLACK)
        return (f"{where}: did {outcome.arithmetic} operations of arithmetic (products written with `*` and "
                f"a sum count as products), where the mask leaves {least} FLOPs of products and a softmax's "
                "elementwise work on what it leaves: skip the blocks whose keys all come after this rank's "
                "queries")
    return None


@judging
def work_problems(run: RankRun) -> list[str]:
    """Causal cases whose values are right: no rank computed more than the mask leaves to compute."""
    problems = []
    for index, case, outcomes in cases_of(run):
        if not case.causal or run.world_size == 1:
            continue
        for rank, (outcome, right) in enumerate(zip(outcomes, right_ranks(run, index), strict=True)):
            if not right:
                problems.append(f"rank {rank}, {case.describe(run.world_size)}: its output is wrong, so its "
                                "skipped work does not count")
            elif problem := _work_problem(case, rank, run.world_size, outcome):
                problems.append(problem)
    return problems
