"""The memory probes of chapter 07's checks: optimizer state reachable from an object, and the tensor bytes
a process really holds (LiveTensorBytes), which is what the FSDP memory check measures."""

import pytest
import torch
from torch import nn

from course_lib.grading.checks.ch07_optimizer.visible import state_bytes
from course_lib.grading.checks.ch07_zero.probes import LiveTensorBytes, closure_of


def test_state_bytes_counts_adamw_moments_not_parameters_or_gradients():
    model = nn.Linear(10, 10)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 10)).sum().backward()
    optimizer.step()
    assert state_bytes(optimizer, model) == 2 * 110 * 4   # exp_avg and exp_avg_sq; the 0-d steps left out


def test_live_bytes_counts_what_is_made_inside_and_alive_not_views_of_older_tensors():
    older = torch.zeros(1000)
    with LiveTensorBytes() as probe:
        view = older[:10].t()            # a view of a tensor made before: not new memory
        made = torch.ones(250)           # 1000 bytes
        assert probe.live() == 1000
        del made
        assert probe.live() == 0
    assert view.numel() == 10


def test_live_bytes_follows_a_storage_freed_with_resize_and_one_autograd_keeps():
    with LiveTensorBytes() as probe:
        full = torch.randn(64, requires_grad=True)        # 256 bytes, a unit's gathered parameters
        x = torch.randn(4, 8, requires_grad=True)         # 128 bytes
        loss = (x @ full.view(8, 8)).tanh().sum()         # autograd keeps the view of `full` and more
        del full                                          # dropping our reference frees nothing
        held = probe.live()
        assert held >= 256 + 128
        loss.backward()
    assert held > 0


def test_live_bytes_sees_resize_to_zero_as_freed():
    with LiveTensorBytes() as probe:
        buffer = torch.empty(100)
        buffer.untyped_storage().resize_(0)
        assert probe.live() == 0
        buffer.untyped_storage().resize_(400)
        assert probe.live() == 400


def test_a_closure_called_with_gradients_off_says_how_torch_calls_it():
    closure = closure_of(lambda: torch.tensor(1.0))
    with torch.no_grad(), pytest.raises(RuntimeError, match="torch.enable_grad"):
        closure()
    assert float(closure()) == 1.0 and closure.calls == [False, True]
