"""The course's running examples: the 6->4->2 MLP and its seeded random dataset.

Every chapter trains the same small model on the same data, so numbers can be compared across
single-device, data-parallel, model-parallel and sharded runs.
"""

from __future__ import annotations

from contextlib import contextmanager

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


@contextmanager
def seeded(seed: int):
    """Draw from torch's global generator seeded with ``seed``, then give the caller's state back."""
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        yield
    finally:
        torch.random.set_rng_state(generator_state)


def make_mlp(seed: int = 0, **sizes) -> TwoLayerMLP:
    """The MLP with weights drawn from ``seed``: every rank that passes the same seed gets the same model."""
    with seeded(seed):
        return TwoLayerMLP(**sizes)


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


# -- a stack of layers to cut into pipeline stages, for the pipeline chapter ---------------------
STACK_LAYERS, STACK_WIDTH = 4, 16


def make_layer_stack(seed: int = 0, layers: int = STACK_LAYERS, width: int = STACK_WIDTH) -> nn.Sequential:
    """``layers`` blocks Linear(width, width) + Tanh, weights from ``seed``: a model to cut into stages."""
    with seeded(seed):
        return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(layers)])


def split_into_stages(model: nn.Sequential, stages: int) -> list[nn.Sequential]:
    """Consecutive blocks of ``model`` per stage, as even as possible (later ones larger)."""
    if not 1 <= stages <= len(model):
        raise ValueError(f"cannot cut {len(model)} blocks into {stages} stages: use 1 to {len(model)} stages")
    bounds = [len(model) * s // stages for s in range(stages + 1)]
    return [nn.Sequential(*list(model)[bounds[s]:bounds[s + 1]]) for s in range(stages)]


# -- a small transformer block, for the tensor-parallel and FSDP chapters -------------------------
BLOCK_DIM, BLOCK_HEADS, BLOCK_FFN, BLOCK_SEQ_LEN = 16, 4, 64, 8


class SelfAttention(nn.Module):
    """Multi-head self-attention whose head count follows from q's width.

    Tensor parallelism splits q, k and v by columns, leaving each rank ``heads / tp`` whole heads;
    computing the count from the local width lets the same module run sharded or not.
    """

    def __init__(self, dim: int = BLOCK_DIM, heads: int = BLOCK_HEADS):
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim ({dim}) must be a multiple of heads ({heads})")
        self.head_dim = dim // heads
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq_len, _ = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, seq_len, -1, self.head_dim).transpose(1, 2)

        attended = nn.functional.scaled_dot_product_attention(heads(self.q(x)), heads(self.k(x)),
                                                              heads(self.v(x)), is_causal=True)
        return self.out(attended.transpose(1, 2).reshape(batch, seq_len, -1))


class FeedForward(nn.Module):
    """dim -> ffn_hidden -> GELU -> dim: the Megatron MLP (column- then row-parallel under TP)."""

    def __init__(self, dim: int = BLOCK_DIM, ffn_hidden: int = BLOCK_FFN):
        super().__init__()
        self.up, self.activation = nn.Linear(dim, ffn_hidden), nn.GELU()
        self.down = nn.Linear(ffn_hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.activation(self.up(x)))


class TransformerBlock(nn.Module):
    """Pre-norm block: x + attention(norm(x)), then + feed_forward(norm(.))."""

    def __init__(self, dim: int = BLOCK_DIM, heads: int = BLOCK_HEADS, ffn_hidden: int = BLOCK_FFN):
        super().__init__()
        self.attention_norm, self.attention = nn.LayerNorm(dim), SelfAttention(dim, heads)
        self.ffn_norm, self.feed_forward = nn.LayerNorm(dim), FeedForward(dim, ffn_hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


def make_transformer_block(seed: int = 0, **sizes) -> TransformerBlock:
    """The block with weights drawn from ``seed`` (same seed, same weights on every rank)."""
    with seeded(seed):
        return TransformerBlock(**sizes)


def make_sequence_batches(steps: int, batch_size: int = 8, seq_len: int = BLOCK_SEQ_LEN, dim: int = BLOCK_DIM,
                          seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``steps`` (input, target) pairs of shape (batch, seq_len, dim), reproducible from ``seed``."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch_size, seq_len, dim, generator=generator),
             torch.randn(batch_size, seq_len, dim, generator=generator)) for _ in range(steps)]
