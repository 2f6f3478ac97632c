"""The course's running examples: the 6->4->2 MLP and its seeded random dataset.

Every chapter trains the same small model on the same data, so numbers can be compared across
single-device, data-parallel, model-parallel and sharded runs.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

IN_FEATURES, HIDDEN_UNITS, OUT_FEATURES = 6, 4, 2
NUM_SAMPLES, BATCH_SIZE, LEARNING_RATE = 1024, 32, 0.01


class TwoLayerMLP(nn.Module):
    """x -> Linear(6, 4) -> ReLU -> Linear(4, 2): small enough to differentiate by hand."""

    def __init__(self, in_features: int = IN_FEATURES, hidden_units: int = HIDDEN_UNITS,
                 out_features: int = OUT_FEATURES):
        super().__init__()
        self.hidden_layer = nn.Linear(in_features, hidden_units)
        self.activation = nn.ReLU()
        self.output_layer = nn.Linear(hidden_units, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output_layer(self.activation(self.hidden_layer(x)))


def make_mlp(seed: int = 0, **sizes) -> TwoLayerMLP:
    """The MLP with weights drawn from ``seed``: every rank that passes the same seed gets the same model."""
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        return TwoLayerMLP(**sizes)
    finally:
        torch.random.set_rng_state(generator_state)


class RandomTensorDataset(Dataset):
    """``num_samples`` pairs (input, target) of standard-normal noise, reproducible from ``seed``."""

    def __init__(self, num_samples: int = NUM_SAMPLES, in_shape: int = IN_FEATURES,
                 out_shape: int = OUT_FEATURES, seed: int = 0):
        if num_samples < 1:
            raise ValueError(f"num_samples must be at least 1, got {num_samples}")
        generator = torch.Generator().manual_seed(seed)
        self.inputs = torch.randn(num_samples, in_shape, generator=generator)
        self.targets = torch.randn(num_samples, out_shape, generator=generator)

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inputs[index], self.targets[index]


def make_dataloader(batch_size: int = BATCH_SIZE, seed: int = 0, sampler=None, **dataset_args) -> DataLoader:
    """The course's loader: fixed order (no shuffle) unless a sampler, e.g. DistributedSampler, is given."""
    return DataLoader(RandomTensorDataset(seed=seed, **dataset_args), batch_size=batch_size,
                      shuffle=False, sampler=sampler)
