"""Ranks sharing fewer cores than they are: when each finishes its compute (processor sharing).

Plain Python, part of the laptop model (``course_lib.sim.cluster.laptop`` re-exports it): the simulator's
expert layer plays its ranks on the student's cores with it (chapter 11).
"""

from __future__ import annotations


def shared_core_finish_times(work: list[float], cores: float) -> list[float]:
    """Seconds after a common start at which each rank finishes ``work[r]`` seconds of compute (as timed
    on one process alone) when all compute at once on ``cores`` cores: while k ranks still compute, each
    gets min(1, cores / k) of a core, as a fair scheduler shares them. Equal work is ``compute_slowdown``;
    unequal work is where it differs: on 4 ranks and 2 cores, the 3 light ranks of chapter 11's leaning
    router finish, and the busy one then has a core of its own for the rest of its work."""
    if not cores > 0:
        raise ValueError(f"cores must be a number > 0, got {cores!r}")
    if any(not w >= 0 for w in work):
        raise ValueError(f"work must be seconds >= 0 for every rank, got {work!r}")
    finish, clock, done = [0.0] * len(work), 0.0, 0.0
    order = sorted(range(len(work)), key=work.__getitem__)
    for position, rank in enumerate(order):
        computing = len(work) - position          # ranks not yet finished, each done `done` seconds
        clock += (work[rank] - done) / min(1.0, cores / computing)
        done, finish[rank] = work[rank], clock
    return finish
