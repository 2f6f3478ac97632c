"""Attention split over the sequence on real ranks: layouts, attention_on_ranks, torch's own ring on CPU."""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from course_lib.real import attention_on_ranks, layout_positions, shard_sequence


def test_layouts():
    assert layout_positions(8, 2, 1) == [4, 5, 6, 7]
    assert layout_positions(8, 2, 0, "zigzag") == [0, 1, 6, 7]
    assert layout_positions(8, 2, 1, "zigzag") == [2, 3, 4, 5]
    every = sorted(p for r in range(3) for p in layout_positions(12, 3, r, "zigzag"))
    assert every == list(range(12))
    with pytest.raises(ValueError, match="multiple of 6"):
        layout_positions(8, 3, 0, "zigzag")
    with pytest.raises(ValueError, match="layout must be one of"):
        layout_positions(8, 2, 0, "striped")
    x = torch.arange(8.0).view(1, 1, 8, 1)
    assert shard_sequence(x, 2, 0, "zigzag").flatten().tolist() == [0.0, 1.0, 6.0, 7.0]


def gathered_attention(q, k, v, causal=False, layout="contiguous"):
    world_size, rank = dist.get_world_size(), dist.get_rank()
    keys = [torch.empty_like(k) for _ in range(world_size)]
    values = [torch.empty_like(v) for _ in range(world_size)]
    dist.all_gather(keys, k)
    dist.all_gather(values, v)
    length = world_size * q.shape[2]
    at = [torch.tensor(layout_positions(length, world_size, r, layout)) for r in range(world_size)]
    mask = (torch.cat(at)[None, :] <= at[rank][:, None]) if causal else None
    return F.scaled_dot_product_attention(q, torch.cat(keys, 2), torch.cat(values, 2), attn_mask=mask)


@pytest.mark.parametrize("causal, layout", [(False, "contiguous"), (True, "contiguous"), (True, "zigzag")])
def test_attention_on_ranks_reassembles_and_records(causal, layout):
    q, k, v = (torch.randn(1, 2, 8, 4, dtype=torch.float64) for _ in range(3))
    run = attention_on_ranks(gathered_attention, q, k, v, 2, causal=causal, layout=layout)
    assert run.difference < 1e-12
    assert [[e.op for e in log.events] for log in run.traffic] == [["all_gather", "all_gather"]] * 2
    assert run.bytes_sent() == [2 * (2 * 8 * 4 * 8 * 1 / 2)] * 2     # (N-1)/N of two 2-rank buffers, each
    assert all(log.flops() > 0 for log in run.compute) and len(run.seconds) == 2
    assert run.unrecorded_seconds is None                                # timed only when asked


def slow_gathered_attention(q, k, v, causal=False):
    time.sleep(0.02)
    return gathered_attention(q, k, v, causal)


def test_attention_on_ranks_times_unrecorded_runs_apart_from_the_recorded_one():
    q, k, v = (torch.randn(1, 2, 8, 4) for _ in range(3))
    run = attention_on_ranks(slow_gathered_attention, q, k, v, 2, warm_up_runs=1, repetitions=3)
    assert 0.02 <= run.unrecorded_seconds < 0.5                        # the timed runs slept too
    assert [[e.op for e in log.events] for log in run.traffic] == [["all_gather", "all_gather"]] * 2
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="repetitions must be a whole number >= 0"):
            attention_on_ranks(gathered_attention, q, k, v, 2, repetitions=bad)


@pytest.mark.slow
def test_torch_ring_runs_on_cpu_and_its_public_api_needs_cuda():
    from course_lib.real import public_context_parallel, torch_ring_attention

    q, k, v = (torch.randn(1, 2, 16, 8) for _ in range(3))
    for rotate, collective in (("allgather", "all_gather_into_tensor"), ("alltoall", "all_to_all_single")):
        run = torch_ring_attention(q, k, v, 2, causal=True, rotate=rotate)
        assert run.difference < 1e-5 and collective in run.collectives[0]
    assert "does not have a sharding strategy registered" in public_context_parallel(q, k, v, 2, causal=True)
    with pytest.raises(ValueError, match="rotate must be one of"):
        torch_ring_attention(q, k, v, 2, rotate="ring")
