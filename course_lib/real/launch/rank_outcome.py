"""What a rank reports back: it returned a value, it raised, or it died; and their form on the pipe.

The pipe carries a tuple (the plain transport reads nothing richer); ``to_wire``/``from_wire`` are the
only places that know its layout, so everything else reads named fields.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RankReturned:
    value: object

    failed = False


@dataclass(frozen=True)
class RankRaised:
    type_name: str
    message: str
    traceback_text: str
    exception_bytes: bytes | None = None

    failed = True


@dataclass(frozen=True)
class RankDied:
    why: str

    failed = True


RankOutcome = RankReturned | RankRaised | RankDied


def to_wire(outcome: RankReturned | RankRaised) -> tuple:
    if isinstance(outcome, RankReturned):
        return ("ok", outcome.value)
    return ("error", outcome.type_name, outcome.message, outcome.traceback_text, outcome.exception_bytes)


def from_wire(payload) -> RankReturned | RankRaised:
    """The outcome ``to_wire`` wrote; raises ValueError on anything else."""
    if isinstance(payload, tuple) and len(payload) == 2 and payload[0] == "ok":
        return RankReturned(payload[1])
    if isinstance(payload, tuple) and len(payload) == 5 and payload[0] == "error":
        return RankRaised(*payload[1:])
    raise ValueError("not a result this launcher sends")
