"""bucket_sweep times a DDP wrapper at several bucket sizes on real ranks and records its buckets."""

from __future__ import annotations

import pytest
import torch.distributed as dist
from torch import nn

from course_lib.real import bucket_sweep


class PerParameterAfterBackward(nn.Module):
    """A stand-in DDP: every gradient all-reduced on its own once the backward is over."""

    def __init__(self, module, bucket_size_mb):
        super().__init__()
        self.module, self.bucket_size_mb = module, bucket_size_mb

    def forward(self, x):
        return self.module(x)

    def finish_gradient_synchronization(self):
        for p in self.module.parameters():
            dist.all_reduce(p.grad)


@pytest.mark.slow
def test_each_size_gets_a_paired_median_its_quartiles_and_its_recorded_buckets():
    widths, sizes = (8, 16, 4), (0.001, 1.0)
    result = bucket_sweep(PerParameterAfterBackward, widths, 4, sizes, world_size=2, steps=3, timeout=60)
    assert result["plain_step"] > 0 and result["backward"] > 0
    assert len(result["overheads"]) == len(result["spreads"]) == len(sizes)
    assert all(low <= high for low, high in result["spreads"])
    per_parameter = [4 * n for n in (16 * 8, 16, 4 * 16, 4)]      # weights and biases, in parameters() order
    assert result["buckets"] == [per_parameter] * len(sizes)


@pytest.mark.parametrize("sizes, steps, batch", [((), 3, 4), ((0,), 3, 4), ((1.0,), 0, 4), ((1.0,), 3, 0)])
def test_bad_sweeps_are_refused_with_what_to_pass(sizes, steps, batch):
    with pytest.raises(ValueError, match="bucket_sizes_mb|steps and batch"):
        bucket_sweep(PerParameterAfterBackward, (8, 4), batch, sizes, steps=steps)
