"""Bytes each rank put on the wire, read off recorded traffic (``record_traffic``'s logs).

A recorded collective of S bytes (nccl-tests' count) sends ``bus_factor(op, N) * S`` per rank with a
ring: (N-1)/N S for an all-gather or a reduce-scatter, twice that for an all-reduce; an all-to-all keeps
1/N of its buffer and sends the rest.
"""

from __future__ import annotations

from course_lib.sim import bus_factor

FAMILY = {"all_gather_into_tensor": "all_gather", "reduce_scatter_tensor": "reduce_scatter",
          "all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
          "broadcast": "broadcast", "all_to_all_single": "all_to_all", "all_to_all": "all_to_all"}


def wire_bytes(log, world_size: int) -> dict[str, float]:
    """{collective: bytes one rank sends} for the collectives in ``log``, as a ring moves them."""
    sent: dict[str, float] = {}
    for event in log.events:
        family = FAMILY.get(event.op)
        if family is None:
            raise ValueError(f"wire_bytes reads collectives ({', '.join(sorted(set(FAMILY)))}); the log "
                             f"holds {event.op!r}: record only the collectives of the step")
        sent[family] = sent.get(family, 0.0) + event.nbytes * bus_factor(family, world_size)
    return sent
