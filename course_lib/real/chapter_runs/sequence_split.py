"""Attention split over the sequence, run for real: which tokens each rank holds, and a run of any
attention function on CPU ranks with its traffic and work recorded, checked against one process.

``attention_on_ranks(fn, q, k, v, world_size)`` gives each rank its chunk of q, k, v (batch x heads x
sequence x head_dim), calls ``fn`` there under ``record_traffic`` and ``record_compute``, and puts the
output chunks back in sequence order beside ``F.scaled_dot_product_attention`` of the whole. With
``repetitions=`` it also times ``fn`` unrecorded by the course's one timing harness: the recorders see
every op through Python, which is the instrument's cost, not the attention's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..launch.runner import run_ranks
from ..measure.timing_harness import interleaved_times
from ..record.compute_log import ComputeLog, record_compute, warm_up
from ..record.traffic_log import POINT_TO_POINT, TrafficLog, record_traffic
from ..record.wire import wire_bytes

LAYOUTS = ("contiguous", "zigzag")


def layout_positions(seq_len: int, world_size: int, rank: int, layout: str = "contiguous") -> list[int]:
    """The sequence positions rank ``rank`` holds, in the order it holds them.

    contiguous: the rank's own 1/world_size of the sequence; zigzag: of 2 x world_size equal chunks, chunk
    ``rank`` then chunk 2 x world_size - 1 - rank (what Llama 3 and torch's head-tail balancer do).
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    pieces = world_size if layout == "contiguous" else 2 * world_size
    if seq_len % pieces:
        raise ValueError(f"a {layout} split of {seq_len} tokens over {world_size} ranks needs the length "
                         f"to be a multiple of {pieces}")
    size = seq_len // pieces
    chunks = [rank] if layout == "contiguous" else [rank, pieces - 1 - rank]
    return [chunk * size + i for chunk in chunks for i in range(size)]


def shard_sequence(tensor: torch.Tensor, world_size: int, rank: int, layout: str = "contiguous",
                   dim: int = 2) -> torch.Tensor:
    """This rank's tokens of ``tensor`` along ``dim`` (a new tensor)."""
    positions = layout_positions(tensor.shape[dim], world_size, rank, layout)
    return tensor.index_select(dim, torch.tensor(positions)).contiguous()


@dataclass
class AttentionRun:
    """One attention split over ranks: the output in sequence order, its largest difference from
    ``F.scaled_dot_product_attention`` on one process, each rank's traffic, work and seconds in the
    recorded run, and (when timed) the median seconds of an unrecorded call, as the slowest rank saw it."""

    output: torch.Tensor
    difference: float
    traffic: list[TrafficLog]
    compute: list[ComputeLog]
    seconds: list[float]
    unrecorded_seconds: float | None = None

    def bytes_sent(self) -> list[float]:
        """Bytes each rank put on the wire: its sends, and its collectives as a ring moves them."""
        sent = []
        for log in self.traffic:
            collectives = TrafficLog(log.rank, [e for e in log.events if e.op not in POINT_TO_POINT])
            sent.append(sum(e.nbytes for e in log.events if e.op in ("send", "isend"))
                        + sum(wire_bytes(collectives, len(self.traffic)).values()))
        return sent


def _rank(rank, world_size, attention, q, k, v, causal, layout, warm_up_runs=0, repetitions=0):
    shards = [shard_sequence(x, world_size, rank, layout) for x in (q, k, v)]
    extra = {} if layout == "contiguous" else {"layout": layout}
    for _ in range(warm_up_runs):
        attention(*shards, causal=causal, **extra)
    unrecorded = None
    if repetitions:
        unrecorded = interleaved_times([lambda: attention(*shards, causal=causal, **extra)], repetitions)[0]
    if warm_up_runs or repetitions:
        dist.barrier()   # the recorded run starts together on every rank
    start = time.perf_counter()
    with record_traffic() as traffic, record_compute() as work:
        out = attention(*shards, causal=causal, **extra)
    seconds = time.perf_counter() - start
    traffic.spans.extend(work.spans("attention"))
    return out, traffic, work, seconds, unrecorded


def attention_on_ranks(attention, q, k, v, world_size: int, causal: bool = False, layout: str = "contiguous",
                       timeout: float = 60, warm_up_runs: int = 0, repetitions: int = 0) -> AttentionRun:
    """Run ``attention(q_chunk, k_chunk, v_chunk, causal=...)`` on ``world_size`` ranks (``layout=`` is
    passed too when it is not contiguous) and compare the reassembled output with one process's.
    ``warm_up_runs`` runs it that many times first, unrecorded (what a timed comparison does, as
    ``calibrate()`` warms its blocks up): the run recorded then pays no first call's costs.
    ``repetitions`` times it unrecorded that many times before the recorded run, by the timing harness
    (started together, the slowest rank's seconds, the median after a warm-up): ``unrecorded_seconds``."""
    for name, count in (("warm_up_runs", warm_up_runs), ("repetitions", repetitions)):
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"{name} must be a whole number >= 0, got {count!r}")
    warm_up()
    results = run_ranks(_rank, world_size, attention, q, k, v, causal, layout, warm_up_runs, repetitions,
                        timeout=timeout)
    output = torch.empty_like(q)
    for rank, (out, *_) in enumerate(results):
        output[:, :, layout_positions(q.shape[2], world_size, rank, layout)] = out
    reference = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return AttentionRun(output, float((output - reference).abs().max()), [r[1] for r in results],
                        [r[2] for r in results], [r[3] for r in results], results[0][4])
