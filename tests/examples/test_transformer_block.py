"""The small transformer block added to course_lib.models for the TP and FSDP examples."""

from __future__ import annotations

import pytest
import torch

from course_lib.models import make_sequence_batches, make_transformer_block


def test_same_seed_same_block_and_batches():
    first, second = make_transformer_block(seed=3), make_transformer_block(seed=3)
    assert all(torch.equal(a, b) for a, b in zip(first.parameters(), second.parameters(), strict=True))
    (x1, y1), (x2, y2) = make_sequence_batches(1)[0], make_sequence_batches(1)[0]
    assert torch.equal(x1, x2) and torch.equal(y1, y2) and x1.shape == (8, 8, 16)


def test_attention_heads_follow_the_local_width_so_column_shards_compute_whole_heads():
    block = make_transformer_block(seed=0)
    attention, x = block.attention, torch.randn(2, 5, 16)
    full = attention(x)
    # Two "ranks", each holding half the heads (q/k/v columns, out rows): their partial sums add up.
    halves = []
    for part in (slice(0, 8), slice(8, 16)):
        shard = make_transformer_block(seed=0).attention
        with torch.no_grad():
            for name in ("q", "k", "v"):
                layer = getattr(shard, name)
                layer.weight = torch.nn.Parameter(getattr(attention, name).weight[part])
                layer.bias = torch.nn.Parameter(getattr(attention, name).bias[part])
            shard.out.weight = torch.nn.Parameter(attention.out.weight[:, part])
            shard.out.bias = torch.nn.Parameter(attention.out.bias / 2)
        halves.append(shard(x))
    assert torch.allclose(halves[0] + halves[1], full, atol=1e-6)


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="multiple of heads"):
        make_transformer_block(dim=10, heads=4)
    with pytest.raises(ValueError, match="steps must be at least 1"):
        make_sequence_batches(0)
