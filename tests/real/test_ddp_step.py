"""measure_ddp_step and make_wide_mlp: the real DDP step chapter 00 holds against the simulator."""

from __future__ import annotations

import pytest
import torch

from course_lib.real import make_wide_mlp, measure_ddp_step
from course_lib.sim import MLPSpec


def test_wide_mlp_has_the_simulator_specs_parameters_and_is_seeded():
    widths = (8, 16, 4)
    model = make_wide_mlp(widths, seed=3)
    assert sum(p.numel() for p in model.parameters()) == MLPSpec(widths).num_params
    assert model(torch.zeros(5, 8)).shape == (5, 4)
    again = make_wide_mlp(widths, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters(), strict=True))
    assert not torch.equal(make_wide_mlp(widths, seed=4)[0].weight, model[0].weight)


@pytest.mark.parametrize("widths", [(8,), (8, 0, 2)])
def test_wide_mlp_refuses_impossible_widths(widths):
    with pytest.raises(ValueError, match="two or more positive layer widths"):
        make_wide_mlp(widths)


def test_ddp_step_refuses_a_batch_that_does_not_split():
    with pytest.raises(ValueError, match="cannot be split evenly over 2 ranks"):
        measure_ddp_step(2, (8, 4), global_batch=5)


@pytest.mark.slow
def test_a_real_ddp_step_is_timed():
    seconds = measure_ddp_step(2, (64, 128, 8), global_batch=16, steps=2)
    assert 0 < seconds < 10
