"""``run_ranks``: run ``fn(rank, world_size, *args)`` on real forked processes from a notebook cell.

The parent forks every rank, relays their output line by line as ``[rank r] ...``, collects their
results, turns the first failure or a hang into a clear error, and kills the ranks' process group on
every path (success, failure, timeout, KeyboardInterrupt) so nothing outlives the call.
"""

from __future__ import annotations

import socket
import time

from ..plumbing.backend import resolve_backend
from ..plumbing.stacks import blocked_line
from .errors import RankFailure, RanksHungError
from .rank_group import RankGroup
from .rank_outcome import RankDied, RankOutcome


def _check_arguments(fn, world_size, timeout) -> None:
    if not callable(fn):
        raise TypeError(f"run_ranks needs a function fn(rank, world_size, ...); got {type(fn).__name__}. "
                        "Pass the function itself, without calling it.")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int (the number of ranks); got {world_size!r}")
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds; got {timeout!r}")


def _failure(rank: int, outcome: RankOutcome) -> RankFailure:
    if isinstance(outcome, RankDied):
        return RankFailure(rank, outcome.why, f"(no Python traceback: {outcome.why})\n", None)
    summary = f"{outcome.type_name}: {outcome.message}" if outcome.message else outcome.type_name
    return RankFailure(rank, summary, outcome.traceback_text, outcome.type_name)


def run_ranks(fn, world_size: int, *args, backend: str = "gloo", timeout: float = 30,
              plain_results: bool = False) -> list:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` forked processes; their results, in rank order.

    The process group is initialised before ``fn`` starts (gloo on loopback by default; ``nccl`` pins
    cuda:rank; ``auto`` picks nccl when there is one GPU per rank). Each rank uses one intra-op thread.
    Results travel back pickled (GPU tensors arrive as CPU copies, so this process never touches CUDA).
    With ``plain_results=True`` they travel as plain data only (numbers, strings, bytes, containers,
    tensors) and are read with torch's weights-only loader: what a grader uses when ``fn`` runs
    untrusted code, since unpickling lets the sender run code in this process.
    Raises ``RankFailure`` for the first rank that raised or died (the others are killed at once) and
    ``RanksHungError`` when the ranks have not all returned after ``timeout`` seconds; either way, and
    on KeyboardInterrupt, every rank and anything it started is killed before this returns.
    """
    _check_arguments(fn, world_size, timeout)
    backend = resolve_backend(backend, world_size)
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        raise RuntimeError("a torch.distributed process group is already initialised in this process, "
                           "and the forked ranks would inherit it. run_ranks starts its own group for each "
                           "call: call torch.distributed.destroy_process_group() here first (or restart "
                           "the kernel).")
    if backend == "nccl":
        import torch

        if torch.cuda.is_initialized():
            raise RuntimeError("CUDA is already initialised in this kernel, and forked ranks cannot use it. "
                               "Restart the kernel and call run_ranks before any other CUDA work.")
    started, finished = time.monotonic(), False
    ranks = RankGroup(world_size, plain_results)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", 0))  # the OS picks a free port: concurrent calls never collide
        listener.listen(max(128, 2 * world_size))
        ranks.start(fn, args, backend, listener, group_timeout_s=2 * timeout + 60)
        listener.close()
        deadline = started + timeout
        while len(ranks.results) < world_size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _hung(ranks, timeout)
            failed = ranks.pump(min(remaining, 0.25))
            if failed is not None:
                ranks.kill_all()
                ranks.drain_output()
                raise _failure(failed, ranks.results[failed])
        ranks.drain_output(0.0)
        finished = True
        return [ranks.results[rank].value for rank in range(world_size)]
    finally:
        listener.close()
        try:
            ranks.release_and_reap() if finished else ranks.kill_all()
        finally:
            ranks.close()


def _hung(ranks: RankGroup, timeout: float) -> RanksHungError:
    waiting = [rank for rank in range(ranks.world_size) if rank not in ranks.results]
    dumps = ranks.dump_stacks(waiting)
    ranks.kill_all()
    ranks.drain_output()
    blocked = {rank: blocked_line(dumps[rank]) for rank in waiting}
    finished = tuple(rank for rank in range(ranks.world_size) if rank in ranks.results)
    return RanksHungError(timeout, blocked, finished, dumps)
