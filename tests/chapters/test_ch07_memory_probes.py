"""The memory probes of chapter 07's checks: optimizer state and parameter bytes reachable from an object."""

import torch
from torch import nn

from course_lib.grading.checks.ch07_fsdp import parameter_bytes
from course_lib.grading.checks.ch07_optimizer import state_bytes


def test_state_bytes_counts_adamw_moments_not_parameters_or_gradients():
    model = nn.Linear(10, 10)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 10)).sum().backward()
    optimizer.step()
    assert state_bytes(optimizer, model) == 2 * 110 * 4   # exp_avg and exp_avg_sq; the 0-d steps left out


def test_parameter_bytes_follows_attributes_and_hook_closures_and_skips_freed_storage():
    held = torch.zeros(100)
    module = nn.Linear(4, 4, bias=False)
    module.register_forward_hook(lambda m, args, out, kept=held: None)
    assert parameter_bytes(module) == 16 * 4 + 100 * 4
    held.untyped_storage().resize_(0)
    assert parameter_bytes(module) == 16 * 4
