"""The models chapter 03's DDP checks hand the student's DDP, which runs their forward for the checks.

Each is rebuilt from a seed on every rank; the checks wrap it in the student's DDP and call it. Like every
grading/checks file, they act for whoever calls them under the exercise's refusal.
"""

from __future__ import annotations

import torch
from torch import nn

from course_lib.models import make_mlp, make_transformer_block, seeded


class FrozenTiedNet(nn.Module):
    """6 -> 6 -> 6 -> 6 -> 2 where the second layer's weight is the first's (tied) and the third is frozen."""

    def __init__(self):
        super().__init__()
        self.first, self.second = nn.Linear(6, 6), nn.Linear(6, 6)
        self.second.weight = self.first.weight
        self.frozen, self.out = nn.Linear(6, 6), nn.Linear(6, 2)
        self.frozen.requires_grad_(False)

    def forward(self, x):
        x = torch.relu(self.second(torch.relu(self.first(x))))
        return self.out(torch.relu(self.frozen(x)))


class SpareLayerMLP(nn.Module):
    """The course MLP with a layer it never uses: that layer's parameters never get a gradient."""

    def __init__(self):
        super().__init__()
        self.hidden, self.spare, self.out = nn.Linear(6, 4), nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x):
        return self.out(torch.relu(self.hidden(x)))


def _batch_norm_mlp():
    return nn.Sequential(nn.Linear(6, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))


def _seeded(factory, seed: int) -> nn.Module:
    with seeded(seed):
        return factory()


MODELS = {"course MLP": lambda seed: make_mlp(seed=seed),
          "transformer block": lambda seed: make_transformer_block(seed=seed),
          "frozen and tied": lambda seed: _seeded(FrozenTiedNet, seed),
          "unused layer": lambda seed: _seeded(SpareLayerMLP, seed),
          "batch norm": lambda seed: _seeded(_batch_norm_mlp, seed)}


def build_model(name: str, seed: int) -> nn.Module:
    return MODELS[name](seed)
