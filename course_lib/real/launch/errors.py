"""The errors a real multi-process run reports back to the notebook.

A rank that raised (``RankFailure``), ranks that stopped making progress (``RanksHungError``), and a
forbidden communication call inside an exercise (``ForbiddenCallError``).
"""

from __future__ import annotations

HANG_HINT = (
    "The usual cause: every rank is in a blocking call waiting for a peer that is itself blocked. "
    "In a ring where every rank first calls dist.send, nobody is receiving yet; let even ranks send "
    "first and odd ranks receive first, or post dist.isend and dist.irecv together and then wait on both. "
    "Also check that every rank calls the same collectives in the same order, and that each send has "
    "a matching recv with the right peer."
)


class RankFailure(RuntimeError):
    """One rank raised (or died); ``.rank`` is which, ``.remote_traceback`` its traceback as text."""

    def __init__(self, rank: int, summary: str, remote_traceback: str, exc_type: str | None = None):
        self.rank = rank
        self.summary = summary
        self.remote_traceback = remote_traceback
        self.exc_type = exc_type
        super().__init__(f"rank {rank} failed: {summary}\n\n--- traceback of rank {rank} ---\n"
                         f"{remote_traceback.rstrip()}")

    def __reduce__(self):
        return (RankFailure, (self.rank, self.summary, self.remote_traceback, self.exc_type))


class RanksHungError(TimeoutError):
    """No progress within the timeout; ``.blocked_at[rank]`` is the user-code line each rank sits on."""

    def __init__(self, timeout: float, blocked_at: dict[int, str], finished: tuple[int, ...] = (),
                 stacks: dict[int, str] | None = None):
        self.timeout = timeout
        self.blocked_at = dict(blocked_at)
        self.finished = tuple(finished)
        self.stacks = dict(stacks or {})
        lines = [f"the ranks did not finish within timeout={timeout:g} s; where each one is blocked:"]
        lines += [f"  rank {rank}: {where}" for rank, where in sorted(self.blocked_at.items())]
        if self.finished:
            lines.append(f"  (ranks {', '.join(map(str, self.finished))} had already returned)")
        lines.append(HANG_HINT)
        lines.append("If the work is simply slow, pass a larger timeout=... to run_ranks.")
        super().__init__("\n".join(lines))

    def __reduce__(self):
        return (RanksHungError, (self.timeout, self.blocked_at, self.finished, self.stacks))


class ForbiddenCallError(RuntimeError):
    """A communication call that the current exercise does not allow."""
