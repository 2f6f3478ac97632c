"""One validated training-step configuration: degrees, batch split, schedule, ZeRO and recompute.

Every wrong combination fails here with a ValueError that says what to change.
"""

from __future__ import annotations

from dataclasses import dataclass

from .collectives import ALGORITHMS
from .layout import DEFAULT_PLACEMENT, check_degrees, check_placement, split_layers
from .memory import RECOMPUTE
from .pipeline import KINDS


@dataclass(frozen=True)
class StepConfig:
    model: object
    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    zero_stage: int = 0
    microbatches: int = 1
    global_batch: int | None = None
    schedule: str = "1f1b"
    virtual_stages: int = 1
    recompute: str = "none"
    sequence_parallel: bool | None = None
    placement: tuple = DEFAULT_PLACEMENT
    dp_algorithm: str = "ring"
    overlap: bool = True
    bucket_bytes: float = 25 * 2**20      # torch DDP's default bucket_cap_mb=25
    prefetch: bool = True
    param_bytes: float = 2
    grad_bytes: float = 2
    optimizer_bytes: float = 12

    @property
    def degrees(self) -> dict:
        return {"dp": self.dp, "tp": self.tp, "pp": self.pp, "cp": self.cp}

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def batch(self) -> int:
        return self.global_batch if self.global_batch is not None else self.dp * self.microbatches

    @property
    def micro_batch_size(self) -> int:
        return self.batch // (self.dp * self.microbatches)

    @property
    def sp(self) -> bool:
        return self.tp > 1 if self.sequence_parallel is None else bool(self.sequence_parallel and self.tp > 1)

    @property
    def is_transformer(self) -> bool:
        return hasattr(self.model, "hidden")

    @property
    def layer_split(self) -> list:
        return split_layers(self.model.layers, self.pp, self.virtual_stages)

    @property
    def pipeline_kind(self) -> str:
        return self.schedule if self.pp > 1 else "1f1b"


def make_config(model, world_size: int, **options) -> StepConfig:
    """Validate ``options`` for ``model`` on ``world_size`` devices and return the StepConfig."""
    config = StepConfig(model, **options)
    degrees = config.degrees
    check_degrees(world_size, degrees)
    check_placement(config.placement)
    if config.zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be 0 (plain DDP), 1, 2 or 3 (FSDP), got {config.zero_stage!r}")
    if config.zero_stage >= 2 and config.pp > 1:
        raise ValueError(f"zero_stage={config.zero_stage} with pp={config.pp}: sharded gradients would be "
                         "reduce-scattered every micro-batch of the pipeline (DeepSpeed refuses it too); "
                         "use zero_stage<=1 with pipeline parallel, or pp=1")
    m = config.microbatches
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ValueError(f"microbatches must be a whole number >= 1, got {m!r}")
    batch = config.batch
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1 or batch % (config.dp * m):
        raise ValueError(f"global_batch={batch!r} sequences must be a positive multiple of dp x microbatches "
                         f"= {config.dp * m}, so every replica gets whole micro-batches")
    if config.schedule not in KINDS:
        raise ValueError(f"schedule must be one of {KINDS}, got {config.schedule!r}")
    if config.virtual_stages != 1 and (config.pp == 1 or config.schedule != "interleaved_1f1b"):
        raise ValueError("virtual_stages > 1 needs pp > 1 and schedule='interleaved_1f1b'")
    if config.recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {RECOMPUTE}, got {config.recompute!r}")
    if config.dp_algorithm not in ALGORITHMS:
        raise ValueError(f"dp_algorithm must be one of {ALGORITHMS}, got {config.dp_algorithm!r}")
    if not config.bucket_bytes > 0:
        raise ValueError(f"bucket_bytes must be > 0, got {config.bucket_bytes!r}")
    model = config.model
    if config.is_transformer:
        if model.heads % config.tp:
            raise ValueError(f"tp={config.tp} must divide the {model.heads} attention heads; "
                             "pick tp among the divisors of heads")
        if model.seq_len % config.cp:
            raise ValueError(f"cp={config.cp} must divide the sequence length {model.seq_len}")
    elif config.tp > 1 or config.cp > 1:
        name = getattr(model, "name", "this model")
        raise ValueError(f"{name} is too small to split with tensor or context parallelism in the "
                         "simulator: use tp=1 and cp=1, or a TransformerSpec")
    _ = config.layer_split  # raises when pp * virtual_stages exceeds the layer count
    return config
