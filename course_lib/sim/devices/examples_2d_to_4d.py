"""The seed's walk finished: 2D (DP x TP), 3D (+ PP) and 4D (+ CP) on the simulated GPUs' virtual clock.

Ranks are laid out as Megatron-LM does (tp innermost, then cp, dp, pp); every message is a seed send/receive.
"""

from __future__ import annotations

from ..checks import amount, whole
from ..job.layout import DEFAULT_PLACEMENT, coordinates, strides
from .examples_0d_1d import GRADIENT_UNITS, ITEMS, UNITS_PER_ITEM
from .simulated_gpu import simulated_gpus

ACTIVATION_UNITS = 10   # our choice: data units of one item's activations at a stage boundary


def _ring(gpus, members: list, rounds: int, units: float, label: str) -> None:
    """``rounds`` steps of a ring among ``members``: everyone sends right, then everyone receives."""
    n = len(members)
    for step in range(rounds):
        for i, r in enumerate(members):
            gpus[r].send(members[(i + 1) % n], f"{label} {step}", units)
        for i, r in enumerate(members):
            gpus[r].receive(members[(i - 1) % n], f"{label} {step}", units)


def _group(rank: int, dims: tuple, degrees: dict, stride: dict) -> list:
    """The ranks that differ from ``rank`` only along ``dims`` (rank itself included)."""
    coords = coordinates(rank, degrees, DEFAULT_PLACEMENT)
    base = rank - sum(coords[d] * stride[d] for d in dims)
    members = [base]
    for d in dims:
        members = [m + k * stride[d] for m in members for k in range(degrees[d])]
    return sorted(members)


def seed_nd(dp: int = 1, tp: int = 1, pp: int = 1, cp: int = 1, items: int = ITEMS,
            units_per_item: float = UNITS_PER_ITEM, gradient_units: float = GRADIENT_UNITS,
            activation_units: float = ACTIVATION_UNITS):
    """Forward passes of ``items`` over dp replicas, pp stages and tp x cp peers, then the gradient ring.

    An item's compute is split over pp stages and tp x cp peers; TP peers all-reduce the activations by a
    ring (2(tp-1) steps), CP peers pass key/value shares round theirs (cp-1 steps), a stage hands its
    activations to the next; at the end each dp x cp group all-reduces its gradient shard
    (gradient_units / (tp pp)). Returns (simulated seconds of the slowest rank, timeline).
    """
    degrees = {d: whole(d, v, hint=" (a parallel degree)") for d, v in (("dp", dp), ("tp", tp), ("pp", pp),
                                                                         ("cp", cp))}
    items = whole("items", items, hint=" (how many items the replicas share)")
    for name, value in (("units_per_item", units_per_item), ("gradient_units", gradient_units),
                        ("activation_units", activation_units)):
        amount(name, value, unit="units")
    if items % dp:
        raise ValueError(f"{items} items do not split evenly over dp={dp} replicas; pick dp dividing {items}")
    world = dp * tp * pp * cp
    gpus = simulated_gpus(world)
    stride = strides(degrees, DEFAULT_PLACEMENT)
    peers = tp * cp
    for replica in range(dp):
        for item in range(items // dp):
            label = f"item {replica * (items // dp) + item}"
            for stage in range(pp):
                first = replica * stride["dp"] + stage * stride["pp"]
                ranks = _group(first, ("tp", "cp"), degrees, stride)
                for r in ranks:
                    if stage > 0:
                        gpus[r].receive(r - stride["pp"], f"{label} activations", activation_units / peers)
                    gpus[r].compute(label, units_per_item / (pp * peers))
                if tp > 1:
                    for r in _group(first, ("cp",), degrees, stride):
                        _ring(gpus, _group(r, ("tp",), degrees, stride), 2 * (tp - 1), activation_units / tp,
                              f"{label} TP all-reduce")
                if cp > 1:
                    for r in _group(first, ("tp",), degrees, stride):
                        _ring(gpus, _group(r, ("cp",), degrees, stride), cp - 1, activation_units / cp,
                              f"{label} CP keys/values")
                if stage < pp - 1:
                    for r in ranks:
                        gpus[r].send(r + stride["pp"], f"{label} activations", activation_units / peers)
    shard = gradient_units / (tp * pp)
    synced = set()
    for r in range(world):
        group = _group(r, ("dp", "cp"), degrees, stride)
        if len(group) > 1 and group[0] not in synced:
            synced.add(group[0])
            _ring(gpus, group, 2 * (len(group) - 1), shard / len(group), "gradient ring")
    title = f"{sum(v > 1 for v in degrees.values())}D: dp={dp} tp={tp} pp={pp} cp={cp}"
    return max(g.now for g in gpus), gpus[0].network.timeline(title)
