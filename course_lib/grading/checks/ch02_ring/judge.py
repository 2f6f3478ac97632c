"""The judging side of chapter 02's ring checks: what a run of the student's ring got wrong, in words.

Every expected value is recomputed here from the seed (``expected_result``); nothing the ranks sent is
trusted beyond being compared.
"""

from __future__ import annotations

import torch

from course_lib.grading.attempt.judge_runner import cases_of, judging, ranks_of
from course_lib.grading.attempt.rank_attempt import RankRun
from course_lib.grading.checks.ch02_ring.ranks import DTYPES, FORBIDDEN_REASON, RingCase, expected_result

SENDS, RECEIVES = frozenset({"send", "isend"}), frozenset({"recv", "irecv"})
MESSAGES_PER_PHASE = {"reduce_scatter": 1, "all_gather": 1, "all_reduce": 2}  # times (N - 1)


def close_to(actual, expected) -> bool:
    if not isinstance(actual, torch.Tensor):
        return False
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return False
    if expected.is_floating_point():
        return bool(torch.allclose(actual, expected, rtol=1e-4, atol=1e-4))
    return bool(torch.equal(actual, expected))


def _describe(case: RingCase, world_size: int) -> str:
    layout = "a strided (non-contiguous) view" if case.strided else "a contiguous tensor"
    return f"{world_size} ranks, {layout} of shape {tuple(case.shape)} and dtype {case.dtype}"


@judging
def value_problems(run: RankRun, kind: str, need_in_place: bool = True) -> list[str]:
    """Wrong values per case and rank; for all_reduce also 'returned the sum but left the input unchanged'."""
    problems = []
    for index, case, outcomes in cases_of(run):
        expected = expected_result(case, run.seed, index, run.world_size, kind)
        for rank, outcome in enumerate(outcomes):
            where = f"rank {rank}, {_describe(case, run.world_size)}"
            after = outcome.after
            if kind == "reduce_scatter":
                got = torch.tensor_split(after.reshape(-1), run.world_size)[rank]
                want = torch.tensor_split(expected.reshape(-1), run.world_size)[rank]
                if not close_to(got, want):
                    problems.append(f"{where}: chunk {rank} (torch.tensor_split(tensor, world_size)[rank]) "
                                    f"should hold the sum {want.tolist()[:6]}, got {got.tolist()[:6]}")
                continue
            if close_to(after, expected):
                if outcome.base is not None and not bool((outcome.base[..., 1] == -5555).all()):
                    problems.append(f"{where}: elements outside the view were overwritten; write only into "
                                    "the tensor you were given (copy_ into it, or into its own chunks)")
                continue
            if not need_in_place and close_to(outcome.returned, expected):
                continue
            if close_to(outcome.returned, expected):
                problems.append(f"{where}: you returned the right sum but left the input unchanged; the "
                                f"{kind} must work in place (write the result into the tensor you were "
                                "given, e.g. tensor.copy_(result))")
            else:
                problems.append(f"{where}: expected {expected.reshape(-1).tolist()[:6]}..., "
                                f"got {after.reshape(-1).tolist()[:6]}...")
    return problems


@judging
def traffic_problems(run: RankRun, kind: str) -> list[str]:
    """Each rank sends only to its right neighbour, exactly k(N-1) messages, at most k(N-1)/N of the bytes."""
    problems, n = [], run.world_size
    for _, case, outcomes in cases_of(run):
        messages = MESSAGES_PER_PHASE[kind] * (n - 1)
        itemsize = torch.empty(0, dtype=DTYPES[case.dtype]).element_size()
        byte_limit = messages * (case.numel * itemsize / n + itemsize)
        for rank, outcome in enumerate(outcomes):
            where = f"rank {rank}, {_describe(case, n)}"
            right, left = (rank + 1) % n, (rank - 1) % n
            collectives = sorted({op for op, _, _ in outcome.events if op not in SENDS | RECEIVES})
            sends = [(peer, nbytes) for op, peer, nbytes in outcome.events if op in SENDS]
            recvs = [peer for op, peer, _ in outcome.events if op in RECEIVES]
            wrong_peers = sorted({peer for peer, _ in sends if peer != right})
            sent = sum(nbytes for _, nbytes in sends)
            if collectives:
                problems.append(f"{where}: called {', '.join(collectives)}; only send/recv/isend/irecv "
                                "are allowed")
            if wrong_peers:
                problems.append(f"{where}: sent to rank(s) {wrong_peers}; in the ring each rank sends only "
                                f"to its right neighbour (rank + 1) % world_size = {right}")
            if any(peer is not None and peer != left for peer in recvs):
                problems.append(f"{where}: received from a rank other than its left neighbour {left}")
            if len(sends) != messages:
                problems.append(f"{where}: sent {len(sends)} messages; a ring {kind} sends exactly "
                                f"{MESSAGES_PER_PHASE[kind]}*(N-1) = {messages}, one chunk per step")
            if sent > byte_limit:
                problems.append(f"{where}: sent {sent} bytes, more than {MESSAGES_PER_PHASE[kind]}*(N-1)/N "
                                f"of the tensor's {case.numel * itemsize} bytes (+1 element per step) = "
                                f"{int(byte_limit)}: send one chunk per step, not the whole tensor")
    return problems


@judging
def forbidden_problems(run: RankRun) -> list[str]:
    """Collectives used (or attempted), and runs that did not complete."""
    used = sorted({op for each in ranks_of(run) for op, _, _ in each.outcome.events
                   if op not in SENDS | RECEIVES})
    return [f"{run.world_size} ranks: called {', '.join(used)}; {FORBIDDEN_REASON}"] if used else []
