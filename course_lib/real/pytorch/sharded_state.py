"""Chapter 09's DCP lessons, the plumbing: a small FSDP2 model with Adam, a few training steps, and its
whole state gathered on rank 0, so that a checkpoint saved on N ranks and loaded on M compares value by value.

The lesson's own cells call ``torch.distributed.checkpoint`` (save, load, async_save) and the state-dict
helpers themselves; this module only builds what they save and reads back what they loaded.
"""

from __future__ import annotations

import torch
import torch._dynamo  # noqa: F401 - Adam's first step imports it (seconds): once here, not in every rank
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_state_dict
from torch.distributed.fsdp import fully_shard

WHOLE = StateDictOptions(full_state_dict=True, cpu_offload=True)


def sharded_mlp(seed: int, width: int = 16) -> tuple[nn.Module, torch.optim.Optimizer]:
    """An 8 -> width -> width -> 6 MLP, each Linear one FSDP2 unit (6 rows on 4 ranks: 2, 2, 2, 0); Adam."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                          nn.Linear(width, 6))
    for layer in model[::2]:
        fully_shard(layer)
    fully_shard(model)
    return model, torch.optim.Adam(model.parameters(), lr=1e-2)


def train_steps(model: nn.Module, optimizer: torch.optim.Optimizer, steps: int, rows: int = 32) -> None:
    """``steps`` Adam steps on one fixed batch (the same on every rank)."""
    generator = torch.Generator().manual_seed(1)
    inputs, targets = torch.randn(rows, 8, generator=generator), torch.randn(rows, 6, generator=generator)
    for _ in range(steps):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(inputs), targets).backward()
        optimizer.step()


def whole_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """Every weight and every Adam state entry, unsharded, on rank 0 (an empty dict on the other ranks)."""
    model_state, optimizer_state = get_state_dict(model, optimizer, options=WHOLE)
    flat = {f"model.{name}": value for name, value in model_state.items()}
    for name, entries in optimizer_state.get("state", {}).items():
        flat |= {f"adam.{name}.{key}": torch.as_tensor(value) for key, value in entries.items()}
    return flat


def whole_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every weight, unsharded, on rank 0 (an empty dict on the other ranks)."""
    return get_model_state_dict(model, options=WHOLE)


def largest_difference(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> float:
    """The largest absolute difference over every entry (infinite when an entry is missing; 0 for two
    empty dicts, as the ranks other than 0 hold)."""
    if set(got) != set(expected):
        return float("inf")
    return max(((got[k].double() - expected[k].double()).abs().max().item() for k in expected), default=0.0)
