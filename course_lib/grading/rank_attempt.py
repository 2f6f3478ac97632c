"""Running a student's code on real ranks for a check: every failure or hang becomes a message, never a raise.

Shared by chapter 07's checks (flat sharding, the sharded optimizer, FSDP): the rank side returns only
plain data (tensors, numbers, containers), which the judging side compares with its own expectations.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field

from course_lib.dist import ForbiddenCallError, RankFailure, RanksHungError, run_ranks


@dataclass
class Attempt:
    """What one run gave: per rank, what the rank function returned; or why there is nothing."""

    world_size: int
    per_rank: list = field(default_factory=list)
    error: str | None = None
    hung: bool = False


def attempt(rank_fn, world_size: int, *args, name: str, timeout: float) -> Attempt:
    """``run_ranks(rank_fn, world_size, *args)`` with student code inside: failures are described."""
    # torch.optim's first step imports torch._dynamo (seconds); import it here, once, so that forked ranks
    # inherit it instead of each importing it against the clock of the timeout
    import torch._dynamo  # noqa: F401

    result = Attempt(world_size)
    try:
        result.per_rank = run_ranks(rank_fn, world_size, *args, timeout=timeout, plain_results=True)
    except RanksHungError as error:
        result.hung = True
        result.error = (f"{name} did not finish on {world_size} ranks within {timeout:g} s (a deadlock: does "
                        f"every rank make the same collective calls in the same order?), so the test "
                        f"stopped it.\n{error}")
    except RankFailure as error:
        if error.exc_type == ForbiddenCallError.__name__:
            lead = f"{name} made a call this part forbids: {error.summary}"
        elif error.exc_type == NotImplementedError.__name__:
            lead = f"{name} is not written yet (it raises NotImplementedError)"
        else:
            lead = f"{name} raised on {world_size} ranks: {error.summary}"
        result.error = f"{lead}\n--- rank {error.rank} ---\n{student_frames(error.remote_traceback)}"
    except Exception as error:  # noqa: BLE001 - a check must report, whatever went wrong
        reason = traceback.format_exception_only(error)[-1]
        result.error = f"running {name} on {world_size} ranks failed: {reason}"
    return result


def student_frames(remote_traceback: str, keep_last: int = 12) -> str:
    """The end of a rank's traceback: the student's frames are the last ones, the checks' the first."""
    lines = remote_traceback.rstrip().splitlines()
    frames = [i for i, line in enumerate(lines) if line.lstrip().startswith("File ")]
    student = [i for i in frames if "<student cells>" in lines[i] or "ipython-input" in lines[i]
               or "/tmp/ipykernel" in lines[i]]
    start = student[0] if student else (frames[-1] if frames else 0)
    return "\n".join(["Traceback (most recent call last):", *lines[start:]][-keep_last:])


def fail_with(problems: list[str], what: str, limit: int = 4) -> None:
    """Raise one AssertionError listing the first problems (the rest are counted, not listed)."""
    if not problems:
        return
    problems = list(dict.fromkeys(problems))
    shown = "\n".join(f"- {p}" for p in problems[:limit])
    more = f"\n(and {len(problems) - limit} more)" if len(problems) > limit else ""
    raise AssertionError(f"{what}:\n{shown}{more}")
