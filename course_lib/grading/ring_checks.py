"""Checks of chapter 02's ring exercise: run the student's ring on real ranks, then judge what came back.

The rank side only runs the student's function on inputs it rebuilds from a seed and records its
traffic; the judging side (the notebook, or the grader) recomputes every expected value itself.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from course_lib.dist import ForbiddenCallError, RankFailure, RanksHungError, record_traffic, run_ranks
from course_lib.grading.student_function import as_student_function

SENDS, RECEIVES = frozenset({"send", "isend"}), frozenset({"recv", "irecv"})
FORBIDDEN = ("collectives",)  # every torch.distributed collective, barrier included
FORBIDDEN_REASON = "the ring exercise must be built from send/recv/isend/irecv"
DTYPES = {"float32": torch.float32, "float64": torch.float64, "int64": torch.int64}
KINDS = ("reduce_scatter", "all_gather", "all_reduce")
MESSAGES_PER_PHASE = {"reduce_scatter": 1, "all_gather": 1, "all_reduce": 2}  # times (N - 1)


@dataclass(frozen=True)
class RingCase:
    """One input: its shape, dtype name, and whether the tensor is a strided (non-contiguous) view."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    strided: bool = False

    @property
    def numel(self) -> int:
        return int(torch.Size(self.shape).numel())


@dataclass
class RingRun:
    """What one world size gave: per case, per rank, the tensor afterwards and the traffic; or an error."""

    world_size: int
    cases: list[RingCase]
    seed: int
    outcomes: list[list[dict]] = field(default_factory=list)   # [case][rank]
    error: str | None = None
    hung: bool = False
    forbidden: bool = False


def rank_input(case: RingCase, seed: int, index: int, rank: int, world_size: int, kind: str):
    """The tensor rank ``rank`` hands to the student in case ``index``, and the base it views (or None).

    For all_gather, only chunk ``rank`` holds data; the others hold junk that must be overwritten.
    """
    generator = torch.Generator().manual_seed((seed * 1_000_003 + index * 1009 + rank) % 2**63)
    dtype = DTYPES[case.dtype]
    if dtype.is_floating_point:
        values = torch.randn(case.shape, generator=generator, dtype=torch.float64).to(dtype)
    else:
        values = torch.randint(-1000, 1000, case.shape, generator=generator, dtype=dtype)
    if kind == "all_gather":
        junk = torch.full_like(values.view(-1), -7777)
        junk_chunks, value_chunks = torch.tensor_split(junk, world_size), torch.tensor_split(values.view(-1),
                                                                                             world_size)
        junk_chunks[rank].copy_(value_chunks[rank])
        values = junk.view(case.shape)
    if not case.strided:
        return values, None
    base = torch.full((*case.shape, 2), -5555, dtype=dtype)
    base[..., 0] = values
    return base[..., 0], base


def expected_result(case: RingCase, seed: int, index: int, world_size: int, kind: str) -> torch.Tensor:
    """What every rank's tensor must hold afterwards (for reduce_scatter: only chunk ``rank`` counts)."""
    inputs = [rank_input(case, seed, index, rank, world_size, kind)[0] for rank in range(world_size)]
    if kind == "all_gather":
        pieces = [torch.tensor_split(inputs[o].reshape(-1), world_size)[o] for o in range(world_size)]
        return torch.cat(pieces).view(case.shape)
    exact = torch.stack([x.to(torch.float64) if x.is_floating_point() else x for x in inputs]).sum(0)
    return exact.to(DTYPES[case.dtype])


def _run_cases(rank, world_size, student, kind, cases, seed, compare_with_torch):
    """Rank side: run the student's function on every case, recording its traffic; no judging here."""
    function = student.resolve()
    outcomes = []
    for index, case in enumerate(cases):
        tensor, base = rank_input(case, seed, index, rank, world_size, kind)
        reference = None
        if compare_with_torch and kind == "all_reduce":
            reference = tensor.clone()
            dist.all_reduce(reference)
        with record_traffic(forbid=FORBIDDEN, reason=FORBIDDEN_REASON) as log:
            returned = function(tensor)
        outcomes.append({
            "after": tensor.detach().clone(),
            "base": None if base is None else base.clone(),
            "returned": returned.detach().clone() if isinstance(returned, torch.Tensor) else None,
            "events": [(str(e.op), e.peer, int(e.nbytes)) for e in log.events],
            "torch_all_reduce": reference,
        })
    return outcomes


def run_student(student, kind: str, world_size: int, cases, seed: int, timeout: float,
                compare_with_torch: bool = False) -> RingRun:
    """Run every case on ``world_size`` real ranks; a failure or a hang is recorded, never raised."""
    run = RingRun(world_size, list(cases), seed)
    name = student.name
    try:
        per_rank = run_ranks(_run_cases, world_size, student, kind, run.cases, seed, compare_with_torch,
                             timeout=timeout, plain_results=True)  # the ranks run student code
    except RanksHungError as error:
        run.hung = True
        run.error = (f"{name} did not finish on {world_size} ranks within {timeout:g} s (a deadlock, or a "
                     f"loop that never ends), so the test stopped it.\n{error}")
    except RankFailure as error:
        run.forbidden = error.exc_type == ForbiddenCallError.__name__
        if run.forbidden:
            lead = f"{name} used a collective, which this exercise forbids: {error.summary}"
        elif error.exc_type == NotImplementedError.__name__:
            lead = f"{name} is not written yet (it raises NotImplementedError)"
        else:
            lead = f"{name} raised on {world_size} ranks: {error.summary}"
        run.error = f"{lead}\n--- rank {error.rank} ---\n{_student_frames(error.remote_traceback)}"
    except Exception as error:  # noqa: BLE001 - the judge must report, whatever went wrong
        reason = traceback.format_exception_only(error)[-1]
        run.error = f"running {name} on {world_size} ranks failed: {reason}"
    else:
        run.outcomes = [[per_rank[rank][index] for rank in range(world_size)] for index in range(len(cases))]
    return run


def _student_frames(remote_traceback: str) -> str:
    """The traceback from the student's own code on (this module's frames say nothing to them)."""
    lines = remote_traceback.rstrip().splitlines()
    cut = [i for i, line in enumerate(lines) if line.lstrip().startswith("File ") and __file__ in line]
    if not cut:
        return "\n".join(lines)
    rest = lines[cut[-1] + 1:]
    while rest and not rest[0].lstrip().startswith("File ") and rest[0].startswith("    "):
        rest = rest[1:]  # the source line and ^^^^ markers of the frame we cut
    return "\n".join(["Traceback (most recent call last):", *rest])


def _close(actual, expected) -> bool:
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


def value_problems(run: RingRun, kind: str, need_in_place: bool = True) -> list[str]:
    """Wrong values per case and rank; for all_reduce also 'returned the sum but left the input unchanged'."""
    problems = [run.error] if run.error else []
    for index, (case, outcomes) in enumerate(zip(run.cases, run.outcomes, strict=False)):
        expected = expected_result(case, run.seed, index, run.world_size, kind)
        for rank, outcome in enumerate(outcomes):
            where = f"rank {rank}, {_describe(case, run.world_size)}"
            after = outcome["after"]
            if kind == "reduce_scatter":
                got = torch.tensor_split(after.reshape(-1), run.world_size)[rank]
                want = torch.tensor_split(expected.reshape(-1), run.world_size)[rank]
                if not _close(got, want):
                    problems.append(f"{where}: chunk {rank} (torch.tensor_split(tensor, world_size)[rank]) "
                                    f"should hold the sum {want.tolist()[:6]}, got {got.tolist()[:6]}")
                continue
            if _close(after, expected):
                if outcome["base"] is not None and not bool((outcome["base"][..., 1] == -5555).all()):
                    problems.append(f"{where}: elements outside the view were overwritten; write only into "
                                    "the tensor you were given (copy_ into it, or into its own chunks)")
                continue
            if not need_in_place and _close(outcome["returned"], expected):
                continue
            if _close(outcome["returned"], expected):
                problems.append(f"{where}: you returned the right sum but left the input unchanged; the "
                                f"{kind} must work in place (write the result into the tensor you were "
                                "given, e.g. tensor.copy_(result))")
            else:
                problems.append(f"{where}: expected {expected.reshape(-1).tolist()[:6]}..., "
                                f"got {after.reshape(-1).tolist()[:6]}...")
    return problems


def traffic_problems(run: RingRun, kind: str) -> list[str]:
    """Each rank sends only to its right neighbour, exactly k(N-1) messages, at most k(N-1)/N of the bytes."""
    if run.error:
        return [run.error]
    problems, n = [], run.world_size
    for case, outcomes in zip(run.cases, run.outcomes, strict=False):
        messages = MESSAGES_PER_PHASE[kind] * (n - 1)
        itemsize = torch.empty(0, dtype=DTYPES[case.dtype]).element_size()
        byte_limit = messages * (case.numel * itemsize / n + itemsize)
        for rank, outcome in enumerate(outcomes):
            where = f"rank {rank}, {_describe(case, n)}"
            right, left = (rank + 1) % n, (rank - 1) % n
            collectives = sorted({op for op, _, _ in outcome["events"] if op not in SENDS | RECEIVES})
            sends = [(peer, nbytes) for op, peer, nbytes in outcome["events"] if op in SENDS]
            recvs = [peer for op, peer, _ in outcome["events"] if op in RECEIVES]
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


def forbidden_problems(run: RingRun) -> list[str]:
    """Collectives used (or attempted), and runs that did not complete."""
    if run.error:
        return [run.error]
    used = sorted({op for outcomes in run.outcomes for outcome in outcomes for op, _, _ in outcome["events"]
                   if op not in SENDS | RECEIVES})
    return [f"{run.world_size} ranks: called {', '.join(used)}; {FORBIDDEN_REASON}"] if used else []


def fail_with(problems: list[str], what: str, limit: int = 4) -> None:
    """Raise one AssertionError listing the first problems (the rest are counted, not listed)."""
    if not problems:
        return
    shown = "\n".join(f"- {p}" for p in problems[:limit])
    more = f"\n(and {len(problems) - limit} more)" if len(problems) > limit else ""
    raise AssertionError(f"{what}:\n{shown}{more}")


VISIBLE_TIMEOUT_S = 10
LARGE_LENGTH = 2**18  # 1 MB of float32


def _visible(candidate, kind: str, world_size: int, length: int, name: str) -> RingRun:
    return run_student(as_student_function(candidate, name), kind, world_size, [RingCase((length,))],
                       seed=2024, timeout=VISIBLE_TIMEOUT_S, compare_with_torch=True)


def check_ring_reduce_scatter(ring_reduce_scatter, world_size: int = 4, length: int = 8) -> None:
    """Visible test: after your reduce-scatter, chunk ``rank`` of every rank holds the sum of that chunk."""
    run = _visible(ring_reduce_scatter, "reduce_scatter", world_size, length, "ring_reduce_scatter")
    fail_with(value_problems(run, "reduce_scatter"), "ring_reduce_scatter gave wrong values")
    fail_with(traffic_problems(run, "reduce_scatter"), "ring_reduce_scatter's traffic is not a ring's")
    print(f"ring_reduce_scatter: chunk r of rank r holds the sum, on {world_size} ranks, length {length}; "
          f"{world_size - 1} messages per rank, all to the right neighbour")


def check_ring_all_gather(ring_all_gather, world_size: int = 4, length: int = 8) -> None:
    """Visible test: after your all-gather, every rank holds every rank's chunk."""
    run = _visible(ring_all_gather, "all_gather", world_size, length, "ring_all_gather")
    fail_with(value_problems(run, "all_gather"), "ring_all_gather gave wrong values")
    fail_with(traffic_problems(run, "all_gather"), "ring_all_gather's traffic is not a ring's")
    print(f"ring_all_gather: every chunk reached every rank, on {world_size} ranks, length {length}; "
          f"{world_size - 1} messages per rank, all to the right neighbour")


def check_ring_all_reduce(ring_all_reduce, world_size: int = 4, length: int = 8) -> None:
    """Visible test: your all-reduce equals dist.all_reduce on every rank, in place."""
    run = _visible(ring_all_reduce, "all_reduce", world_size, length, "ring_all_reduce")
    fail_with(value_problems(run, "all_reduce"), "ring_all_reduce gave wrong values")
    different = [f"rank {rank}: {o['after'].tolist()}, dist.all_reduce: {o['torch_all_reduce'].tolist()}"
                 for rank, o in enumerate(run.outcomes[0]) if not _close(o["after"], o["torch_all_reduce"])]
    fail_with(different, "ring_all_reduce differs from dist.all_reduce")
    print(f"ring_all_reduce: equals dist.all_reduce on all {world_size} ranks (length {length}), in place")


def check_ring_all_reduce_traffic(ring_all_reduce, world_size: int = 4, length: int = 8) -> None:
    """Visible test: 2(N-1) messages per rank, all to the right neighbour, one chunk each."""
    run = _visible(ring_all_reduce, "all_reduce", world_size, length, "ring_all_reduce")
    fail_with(traffic_problems(run, "all_reduce"), "ring_all_reduce's traffic is not a ring's")
    sent = [sum(nbytes for op, _, nbytes in o["events"] if op in SENDS) for o in run.outcomes[0]]
    print(f"ring_all_reduce traffic: every rank sent {2 * (world_size - 1)} messages to its right neighbour, "
          f"{sent[0]} bytes in all of a {length * 4}-byte tensor")


def check_ring_all_reduce_no_collectives(ring_all_reduce, world_size: int = 4, length: int = 8) -> None:
    """Visible test: the sum comes out right with every collective forbidden."""
    run = _visible(ring_all_reduce, "all_reduce", world_size, length, "ring_all_reduce")
    fail_with(forbidden_problems(run) + value_problems(run, "all_reduce", need_in_place=False),
              "ring_all_reduce must be a working all-reduce made only of send/recv/isend/irecv")
    print("ring_all_reduce: built from point-to-point calls only")


def check_ring_all_reduce_no_deadlock(ring_all_reduce, world_size: int = 4, length: int = LARGE_LENGTH):
    """Visible test: a 1 MB all-reduce on 4 ranks finishes (with the right sum) within the timeout."""
    run = _visible(ring_all_reduce, "all_reduce", world_size, length, "ring_all_reduce")
    fail_with(value_problems(run, "all_reduce", need_in_place=False), "ring_all_reduce did not finish right")
    print(f"ring_all_reduce: no deadlock, {length * 4 / 2**20:g} MB on {world_size} ranks "
          f"within {VISIBLE_TIMEOUT_S} s")
