"""Chapter 09's training job: what a data-parallel run needs (data, model, optimizer, loss), for train().

The exercise's ``train(job)`` builds its run from a ``TrainingJob`` and reports each step's loss with
``job.report``; the checks read those reports, and may preempt the run there. Nothing here touches the
global random number generator except the model's dropout, which is what a checkpoint must carry on.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn
from torch.utils.data import TensorDataset

from course_lib.real.cluster.preemption_rank import step_reached

INPUTS, HIDDEN, OUTPUTS = 8, 16, 4


@dataclass(frozen=True)
class TrainingJob:
    """A data-parallel training run: the same job on every rank.

    checkpoint_dir: the folder for checkpoints (it may hold an earlier, preempted run's);
    total_steps: optimizer steps to take; save_every: checkpoint after every save_every-th step;
    global_batch: samples per step over all ranks (each rank takes global_batch // world_size);
    grace_s: seconds a run has, after SIGTERM, to save and return.
    """

    checkpoint_dir: str
    seed: int = 0
    total_steps: int = 12
    save_every: int = 3
    global_batch: int = 12
    dataset_size: int = 60
    dropout: float = 0.2
    grace_s: float = 15.0

    @functools.cached_property
    def dataset(self) -> TensorDataset:
        """(inputs, targets) pairs; ``job.dataset[indices]`` is the (inputs, targets) of those rows."""
        generator = torch.Generator().manual_seed(self.seed)
        inputs = torch.randn(self.dataset_size, INPUTS, generator=generator)
        mixing = torch.randn(INPUTS, OUTPUTS, generator=generator)
        noise = torch.randn(self.dataset_size, OUTPUTS, generator=generator)
        targets = torch.tanh(inputs @ mixing) + 0.1 * noise
        return TensorDataset(inputs, targets)

    def build_model(self) -> nn.Module:
        """The model, with the same initial weights on every rank (the global RNG is left as it was)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed + 1)
            return nn.Sequential(nn.Linear(INPUTS, HIDDEN), nn.Tanh(), nn.Dropout(self.dropout),
                                 nn.Linear(HIDDEN, OUTPUTS))

    def build_optimizer(self, parameters) -> torch.optim.Optimizer:
        return torch.optim.AdamW(parameters, lr=0.05, weight_decay=0.01)

    def loss(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """This rank's loss on its rows (dropout draws from this rank's global RNG)."""
        return F.mse_loss(model(inputs), targets)

    def report(self, step: int, loss) -> None:
        """Call on every rank after each optimizer step (steps count from 1), with that step's loss."""
        step_reached(int(step), loss_text(loss))

    def rank_seed(self, rank: int) -> int:
        """What the checks seed each rank's global RNG with before train(job) starts."""
        return self.seed * 7919 + 1000 + rank

    @property
    def steps_per_epoch(self) -> int:
        return self.dataset_size // self.global_batch


def loss_text(loss) -> str:
    """A loss as exact text (float.hex), so that the checks compare it bit for bit."""
    try:
        return float(loss.detach() if isinstance(loss, torch.Tensor) else loss).hex()
    except (TypeError, ValueError, RuntimeError):
        return f"not a number: {type(loss).__name__}"
