"""The seed's 0D and 1D examples replayed on the virtual clock, and the correct ring beside its loop.

The seed's sizes as we set them: 16 items of 20 compute units; a gradient of 100 data units. The
seed describes its 1D example as a ring all-reduce; ring="seed" is a naive loop of our own beside it.
"""

from __future__ import annotations

from ..checks import amount, whole
from .simulated_gpu import simulated_gpus

ITEMS = 16
UNITS_PER_ITEM = 20
GRADIENT_UNITS = 100


def seed_0d(items: int = ITEMS, units_per_item: float = UNITS_PER_ITEM):
    """One GPU processes every item in turn. Returns (simulated seconds, timeline); 16 x 20 -> 32.0 s."""
    items = whole("items", items, hint=" (how many items the device processes)")
    amount("units_per_item", units_per_item, unit="compute units")
    (gpu,) = simulated_gpus(1)
    for item in range(items):
        gpu.compute(f"item {item}", units_per_item)
    return gpu.now, gpu.network.timeline("0D: one device")


def seed_1d(world_size: int = 4, items: int = ITEMS, units_per_item: float = UNITS_PER_ITEM,
            gradient_units: float = GRADIENT_UNITS, ring: str = "seed"):
    """Data parallel: each rank computes items/N, then synchronises gradients.

    ring="seed": a naive loop with the seed's constants, N rounds of sending the *full* gradient to the
    next rank (chapter 00's foil; the seed itself says it synchronises with a ring all-reduce);
    ring="correct": reduce-scatter + all-gather, 2(N-1) rounds of a chunk of S/N.
    Returns (simulated seconds of the slowest rank, timeline).
    """
    if ring not in ("seed", "correct"):
        raise ValueError(f"ring must be 'seed' or 'correct', got {ring!r}")
    world_size = whole("world_size", world_size, hint=" (how many simulated GPUs)")
    items = whole("items", items, hint=" (how many items the ranks share)")
    amount("units_per_item", units_per_item, unit="compute units")
    amount("gradient_units", gradient_units, unit="data units")
    if items % world_size:
        raise ValueError(f"{items} items do not split evenly over {world_size} ranks; "
                         "choose a world_size that divides the item count")
    gpus = simulated_gpus(world_size)
    per_rank = items // world_size
    for gpu in gpus:
        for item in range(per_rank):
            gpu.compute(f"item {gpu.rank * per_rank + item}", units_per_item)
    if world_size > 1:
        rounds = world_size if ring == "seed" else 2 * (world_size - 1)
        size = gradient_units if ring == "seed" else gradient_units / world_size
        for step in range(rounds):
            # Every rank sends first, then receives: a send never waits for the receiver.
            for gpu in gpus:
                gpu.send((gpu.rank + 1) % world_size, f"grad step {step}", size)
            for gpu in gpus:
                gpu.receive((gpu.rank - 1) % world_size, f"grad step {step}", size)
    seconds = max(g.now for g in gpus)
    return seconds, gpus[0].network.timeline(f"1D: data parallel, {ring} ring, {world_size} ranks")
