"""The judging side of chapter 10's overlap and backward checks: what the student's ring did in what order,
and how its gradients and traffic compare with autograd through attention on one process (float64).

An overlap failure comes with the rank's own calls and products drawn beside a ring that overlaps.
"""

from __future__ import annotations

import torch

from course_lib.grading.attempt.judge_runner import cases_of, failures, judging, ranks_of
from course_lib.grading.attempt.rank_attempt import RankRun
from course_lib.grading.checks.ch10_ring_attention.judge import (
    MEMORY_FROM_RANKS,
    expected_rows,
    kv_bytes,
    memory_growth,
    work_bound,
)
from course_lib.grading.checks.ch10_ring_attention.ranks import DTYPES, AttentionCase
from course_lib.grading.checks.ch10_ring_backward.ranks import whole_forward
from course_lib.real.chapter_runs.sequence_split import layout_positions

SENDS, RECEIVES = frozenset({"send", "isend"}), frozenset({"recv", "irecv"})
BACKWARD_PRODUCTS = 5 / 2   # a block's backward: 5 products (scores, dV, dP, dQ, dK) against the forward's 2
NAMES = ("dq", "dk", "dv")


# --- overlap ---------------------------------------------------------------------------------------------

def _posted_windows(timeline: list) -> list[tuple[int, str, int, bool]]:
    """Per point-to-point call, in the order of its wait: (where it was posted in the timeline, op, peer,
    whether products ran between its post and its wait)."""
    found, open_calls = [], {}
    for position, mark in enumerate(timeline):
        if mark[0] == "post":
            open_calls.setdefault((mark[1], mark[2]), []).append(position)
        elif mark[0] == "wait":
            start = open_calls[(mark[1], mark[2])].pop(0)
            inside = any(m[0] == "compute" for m in timeline[start:position])
            found.append((start, mark[1], mark[2], inside))
    return found


def _windows(timeline: list) -> list[tuple[str, int, bool]]:
    """Per point-to-point call, in order: (op, peer, whether products ran between its post and its wait)."""
    return [(op, peer, inside) for _, op, peer, inside in _posted_windows(timeline)]


def _words(timeline: list) -> list[str]:
    """The timeline in words, consecutive products folded into one "compute"."""
    words: list[str] = []
    for mark in timeline:
        word = "compute" if mark[0] == "compute" else f"{mark[0]} {mark[1]}({mark[2]})"
        if not (word == "compute" and words and words[-1] == "compute"):
            words.append(word)
    return words


def expected_words(rank: int, n: int) -> list[str]:
    """One ring that overlaps: each step posts its transfer, computes the block it holds, then waits."""
    right, left = (rank + 1) % n, (rank - 1) % n
    words = []
    for _ in range(n - 1):
        words += [f"post isend({right})", f"post irecv({left})", "compute",
                  f"wait isend({right})", f"wait irecv({left})"]
    return words + ["compute"]


def overlap_drawing(timeline: list, rank: int, n: int, theirs: list[str] | None = None,
                    ring: str = "a ring that overlaps") -> str:
    """The rank's calls and products in order, beside ``ring`` (the forward's by default), one line a step."""
    yours, theirs = _words(timeline), theirs or expected_words(rank, n)
    width = max(len(w) for w in yours + theirs + ["yours"]) + 2
    lines = [f"rank {rank}'s calls and products in the order they ran (yours | {ring}):"]
    for i in range(max(len(yours), len(theirs))):
        mine = yours[i] if i < len(yours) else ""
        other = theirs[i] if i < len(theirs) else ""
        lines.append(f"  {mine:<{width}}| {other}")
    return "\n".join(lines)


@judging
def overlap_problems(run: RankRun) -> list[str]:
    """Every transfer posted before some products and waited on after them (only cases whose rows are
    right count: a wrong ring's overlap is not judged)."""
    problems, n = [], run.world_size
    for index, case, outcomes in cases_of(run):
        wants = expected_rows(run, index)
        for rank, (outcome, want) in enumerate(zip(outcomes, wants, strict=True)):
            where = f"rank {rank}, {case.describe(n)}"
            out = outcome.out
            if out is None or out.shape != want.shape or \
                    float((out.to(torch.float64) - want).abs().max()) > case.tolerance:
                problems.append(f"{where}: its output is wrong, so its overlap does not count")
                continue
            windows = _windows(outcome.timeline)
            exposed = [f"{op} with rank {peer}" for op, peer, inside in windows if not inside]
            if not windows and n > 1:
                exposed = ["no point-to-point call at all"]
            if exposed:
                problems.append(
                    f"{where}: {len(exposed)} of its {len(windows)} transfers ({', '.join(exposed[:3])}"
                    f"{', ...' if len(exposed) > 3 else ''}) had no products between being posted and being "
                    "waited on: post the next block's transfer, compute with the block you hold, then wait\n"
                    + overlap_drawing(outcome.timeline, rank, n))
                return problems       # one rank drawn is enough
    return problems


# --- the backward ----------------------------------------------------------------------------------------

def expected_grads(run: RankRun, index: int) -> list[list[torch.Tensor]]:
    """Per rank, dq, dk, dv of its rows by autograd through attention over the whole sequence (float64)."""
    case, n = run.cases[index], run.world_size
    q, k, v, _, _, grad_out = whole_forward(case, run.seed, index, n)
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if case.causal:
        length = q.shape[2]
        scores = scores.masked_fill(torch.ones(length, length, dtype=torch.bool).triu(1), float("-inf"))
    (torch.softmax(scores, dim=-1) @ v).backward(grad_out)
    per_rank = []
    for rank in range(n):
        at = layout_positions(n * case.chunk, n, rank, case.layout)
        per_rank.append([t.grad[:, :, at] for t in (q, k, v)])
    return per_rank


def _grad_problem(case: AttentionCase, got, want: torch.Tensor) -> str | None:
    if got is None:
        return "missing"
    if tuple(got.shape) != tuple(want.shape) or got.dtype != DTYPES[case.dtype]:
        return (f"shape {tuple(got.shape)} and dtype {got.dtype}; expected {tuple(want.shape)}, "
                f"{DTYPES[case.dtype]}")
    if not bool(torch.isfinite(got).all()):
        return "holds inf or NaN"
    error = float((got.to(torch.float64) - want).abs().max())
    tolerance = 1e-9 if case.dtype == "float64" else 1e-4
    return None if error <= tolerance else f"largest difference {error:.3g} (allowed {tolerance:g})"


@judging
def grad_problems(run: RankRun, names: tuple[str, ...]) -> list[str]:
    """The named gradients of each rank against autograd's, case by case."""
    problems = []
    for index, case, outcomes in cases_of(run):
        for rank, (outcome, wants) in enumerate(zip(outcomes, expected_grads(run, index), strict=True)):
            where = f"rank {rank}, {case.describe(run.world_size)}"
            if len(outcome.grads) != 3:
                problems.append(f"{where}: returned {outcome.returned} of {len(outcome.grads)} tensor(s); "
                                "expected the tuple (dq, dk, dv)")
                continue
            for name, got, want in zip(NAMES, outcome.grads, wants, strict=True):
                if name in names and (problem := _grad_problem(case, got, want)):
                    owner = " (dk and dv belong to the rank that holds those keys)" if name != "dq" else ""
                    problems.append(f"{where}: {name} {problem}{owner}")
    return problems


def backward_bytes(case: AttentionCase, n: int) -> int:
    """A ring backward's bytes per rank: K and V passed on N-1 times, their gradients N times (round the
    ring with the blocks, then one step home to their owner)."""
    return (2 * n - 1) * kv_bytes(case) if n > 1 else 0


@judging
def backward_traffic_problems(run: RankRun) -> list[str]:
    """To ring neighbours only, exactly (2N-1) chunks of K and V's size per rank, no collective."""
    problems, n = [], run.world_size
    for each in ranks_of(run):
        case, rank, outcome = each.case, each.rank, each.outcome
        where = f"rank {rank}, {case.describe(n)}"
        if outcome.dispatched:
            problems.append(f"{where}: ran {', '.join(sorted(set(outcome.dispatched)))}: the backward "
                            "passes its blocks and gradients with send/recv/isend/irecv only")
        sends = [(peer, nbytes) for op, peer, nbytes in outcome.events if op in SENDS]
        receives = {peer for op, peer, _ in outcome.events if op in RECEIVES}
        peers = {peer for peer, _ in sends}
        right, left = (rank + 1) % n, (rank - 1) % n
        if n > 1 and not (peers | receives) <= {right, left}:
            problems.append(f"{where}: sent to {sorted(peers)} and received from {sorted(receives)}; "
                            f"a ring talks to its neighbours {left} and {right} only")
        sent, want = sum(nbytes for _, nbytes in sends), backward_bytes(case, n)
        if not want <= sent <= want + 2 * n * (8 * case.chunk + 64):
            problems.append(f"{where}: sent {sent} bytes; a ring backward sends {want}: K and V on to "
                            f"the next rank N-1 = {n - 1} times, and their gradients N = {n} times "
                            "(round the ring with their blocks and one step home), never anything else")
    return problems


@judging
def backward_work_problems(run: RankRun) -> list[str]:
    """Where the gradients are right: no rank computes more products than five per block the mask leaves
    (scores from the saved log-sum-exp, dV, dP, dQ, dK)."""
    problems, n = [], run.world_size
    wrong = _wrong_ranks(run)
    for each in ranks_of(run):
        case, rank, outcome = each.case, each.rank, each.outcome
        where = f"rank {rank}, {case.describe(n)}"
        if where in wrong:
            problems.append(f"{where}: its gradients are wrong, so its work does not count")
            continue
        bound = BACKWARD_PRODUCTS * (work_bound(case, rank, n) if case.causal
                                     else 1.05 * n * 4 * case.batch * case.heads * case.chunk ** 2
                                     * case.head_dim)
        if outcome.flops > bound:
            problems.append(f"{where}: computed {outcome.flops} FLOPs of products, more than the "
                            f"{int(bound / 1.05)} of five products per block the mask leaves: recompute "
                            "each block's probabilities from the saved log-sum-exp, not the softmax "
                            "statistics again")
    return problems


# --- the backward's overlap and memory -------------------------------------------------------------------

def expected_backward_words(rank: int, n: int) -> list[str]:
    """A ring backward that overlaps: each step posts the held block's K and V on, computes with it, waits
    for the dK and dV the step before sent on (and for K and V), then sends its block's dK and dV on; the
    last of them, the trip home, has no products left to hide behind."""
    right, left = (rank + 1) % n, (rank - 1) % n
    post = [f"post isend({right})", f"post irecv({left})"]
    wait = [f"wait isend({right})", f"wait irecv({left})"]
    words = []
    for step in range(n):
        words += (post if step < n - 1 else []) + ["compute"] + (wait if step > 0 else [])
        words += (wait if step < n - 1 else []) + post
    return words + wait


def _backward_exposed(timeline: list) -> tuple[list[str], int]:
    """The transfers with no products between post and wait, the last isend and irecv posted (the
    gradients' trip home, after the last block) excused; and how many transfers there were."""
    windows = _posted_windows(timeline)
    home = {max((w[0] for w in windows if w[1] == op), default=None) for op in ("isend", "irecv")}
    exposed = [f"{op} with rank {peer}" for posted, op, peer, inside in windows
               if not inside and posted not in home]
    return exposed, len(windows)


def _wrong_ranks(run: RankRun) -> set[str]:
    """"rank r, <case>" of every rank whose gradients are wrong in some case."""
    return {p.split(":")[0] for p in grad_problems(run, NAMES)}


@judging
def backward_overlap_problems(run: RankRun) -> list[str]:
    """Without the mask, where the gradients are right: every transfer of K and V and of dK and dV but the
    last trip home posted before some products and waited on after them."""
    problems, n = [], run.world_size
    wrong = _wrong_ranks(run)
    for each in ranks_of(run):
        case, rank, outcome = each.case, each.rank, each.outcome
        if case.causal or n == 1:
            continue              # under the mask a rank may have no products in a step to hide behind
        where = f"rank {rank}, {case.describe(n)}"
        if where in wrong:
            problems.append(f"{where}: its gradients are wrong, so its overlap does not count")
            continue
        exposed, count = _backward_exposed(outcome.timeline)
        if exposed or count == 0:
            problems.append(
                f"{where}: {len(exposed) or 'no'} of its {count} transfers "
                f"({', '.join(exposed[:3]) or 'none at all'}{', ...' if len(exposed) > 3 else ''}) had no "
                "products between being posted and being waited on (only the gradients' last trip home "
                "may): post each block's K and V, and the dK and dV finished at the step before, before the "
                "products of the block you hold, and wait for them after\n"
                + overlap_drawing(outcome.timeline, rank, n, expected_backward_words(rank, n),
                                  "a ring backward that overlaps"))
            return problems       # one rank drawn is enough
    return problems


def backward_memory_problems(runs: list[RankRun], index: int) -> list[str]:
    """Case ``index`` (the same chunk on every world size), where the gradients are right: the most new
    tensor memory a rank holds may not grow with the ranks (compared from 3 ranks on, as the forward's)."""
    done = [run for run in runs if run.world_size >= MEMORY_FROM_RANKS]
    if not all(run.completed for run in runs) or len(done) < 2:   # a failed run hides the larger sizes
        return failures(runs)[:1] or [f"the memory case ran on fewer than {MEMORY_FROM_RANKS} ranks twice"]
    case = done[0].cases[index]
    wrong = [p for run in done for p in grad_problems(run, NAMES)
             if case.describe(run.world_size) in p.split(":")[0]]
    if wrong:
        return [f"{wrong[0]}; its gradients are wrong, so its memory does not count"]
    grew = memory_growth(done, index)
    if grew is None:
        return []
    (fewest, least), (most, peak) = grew
    return [f"{case.describe(most)}: the most new tensor memory a rank held grew from {least} bytes "
            f"on {fewest} ranks to {peak} on {most} (one block of K and V is {kv_bytes(case)} "
            "bytes): a ring backward holds the block it works on, the one arriving and their gradients, "
            "however many ranks there are; does something get kept for every block?"]
