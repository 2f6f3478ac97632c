"""One validated training-step configuration: degrees, batch split, schedule, ZeRO and recompute.

Every wrong combination fails here with a ValueError that says what to change.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from numbers import Integral

from ..checks import amount, one_of, whole
from ..vocabulary import ALGORITHMS, ATTENTION, CP_METHODS, PIPELINE_SCHEDULES, RECOMPUTE
from .layout import DEFAULT_PLACEMENT, check_degrees, check_placement, split_layers


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
    # The data-parallel group's collectives: "nccl" runs what NCCL's tuner picks (collective_time).
    dp_algorithm: str = "nccl"
    overlap: bool = True
    bucket_bytes: float = 25 * 2**20      # torch DDP's default bucket_cap_mb=25
    first_bucket_bytes: float = 2**20     # torch DDP closes its first bucket at 1 MiB, to start early
    prefetch: bool = True
    # Pipeline sends overlap compute (asynchronous p2p). False: each send blocks its stage until it has
    # arrived, as Megatron-LM's batch_isend_irecv followed by req.wait() and torch.cuda.synchronize() does.
    p2p_overlap: bool = True
    param_bytes: float = 2
    grad_bytes: float = 2
    optimizer_bytes: float = 12
    # Layers of each virtual stage j (chunk c of stage s is j = c * pp + s); None splits them evenly.
    # Llama 3 gives its first and last stage one layer fewer (see published.py).
    stage_layers: tuple | None = None
    # Expert parallelism (an MoESpec only): the routed experts of every MoE layer spread over ep ranks of
    # the data-parallel dimension (ep divides dp: the EP group is ep neighbouring data-parallel replicas, as
    # DeepSeek-V3's EP 64 inside its DP, arXiv 2412.19437, section 3.2). Their tokens travel by all-to-all.
    ep: int = 1
    expert_imbalance: float = 1.0         # busiest rank's routed tokens over the average (1: balanced)
    node_limit: int | None = None         # a token reaches at most this many nodes (DeepSeek-V3: 4)
    dispatch_bytes: float = 2             # bytes per element sent to the experts (FP8 dispatch: 1)
    combine_bytes: float = 2              # bytes per element sent back (and every backward all-to-all)
    ep_overlap: bool = False              # all-to-alls run beside the other micro-batch's compute (DualPipe)
    comm_sm_share: float = 0.0            # share of the GPU's compute the overlapped all-to-alls take
    fp8: bool = False                     # the layers' matrix multiplies at the preset's FP8 rate
    # How the cp ranks exchange keys and values (CP_METHODS): all-gathered before each attention, as Llama 3
    # did (Dubey et al. 2024, section 3.3.2), passed round a ring, or all-to-all to whole heads (Ulysses).
    cp_method: str = "all_gather"
    # The attention core as the memory plan counts it: fused (FlashAttention, no s x s scores stored) or
    # unfused (the scores stored, as Korthikanti et al. 2022 count them): ATTENTION.
    attention: str = "fused"
    # cp_method="all_gather" only: torch's variant, the local chunk's attention computed while K and V are
    # gathered (else the gather is exposed before the attention, as Llama 3's was): context_costs.py.
    cp_local_overlap: bool = False
    # ZeRO-1/2: the updated parameters' all-gather overlaps the next step's forward, as Megatron-Core's
    # distributed optimizer does with overlap_param_gather=True (its default is False: gathered after the
    # optimizer step, exposed). The simulator starts it with the step, beside the first forwards.
    overlap_param_gather: bool = False

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
        if self.stage_layers is not None:
            return list(self.stage_layers)
        return split_layers(self.model.layers, self.pp, self.virtual_stages)

    @property
    def pipeline_kind(self) -> str:
        return self.schedule if self.pp > 1 else "1f1b"


OPTIONS = tuple(f.name for f in fields(StepConfig) if f.name != "model")


def check_model(model) -> None:
    """A TransformerSpec, an MLPSpec, or anything with their layer count and FLOP formula."""
    if not (hasattr(model, "layers") and hasattr(model, "training_flops")
            and (hasattr(model, "hidden") or hasattr(model, "sizes"))):
        raise ValueError(f"model must be a TransformerSpec or an MLPSpec (for example sim.LLAMA3_8B), "
                         f"got {type(model).__name__}: {model!r}"[:300])


def make_config(model, world_size: int, **options) -> StepConfig:
    """Validate ``options`` for ``model`` on ``world_size`` devices and return the StepConfig."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:   # a typo (virtual_stage=2) must not vanish into **options or surface as a TypeError
        raise ValueError(f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
                         f"the valid options are {', '.join(OPTIONS)}")
    check_model(model)
    config = StepConfig(model, **options)
    check_degrees(world_size, config.degrees)
    if isinstance(config.placement, str):   # tuple("tpcpdppp") would split it into letters
        raise ValueError(f"placement must be a tuple naming each of tp, cp, dp, pp once (innermost first), "
                         f"got the string {config.placement!r}")
    check_placement(config.placement)
    _check_strategy(config)
    _check_sizes_and_switches(config)
    _check_overlaps(config)
    _check_model_split(config)
    _check_stage_layers(config)
    _check_experts(config)
    _ = config.layer_split  # raises when pp * virtual_stages exceeds the layer count
    # numpy integers (from a slider or np.arange) pass the checks; store plain ints from here on.
    whole_numbers = ("dp", "tp", "pp", "cp", "zero_stage", "microbatches", "virtual_stages", "ep")
    plain = {k: int(getattr(config, k)) for k in whole_numbers}
    if config.stage_layers is not None:
        plain["stage_layers"] = tuple(int(n) for n in config.stage_layers)
    batch = None if config.global_batch is None else int(config.batch)
    return replace(config, global_batch=batch, **plain)


def _check_strategy(config) -> None:
    """ZeRO stage, batch split, pipeline schedule, recompute and the data-parallel algorithm."""
    zero = whole("zero_stage", config.zero_stage, 0)
    if zero > 3:
        raise ValueError(f"zero_stage must be 0 (plain DDP), 1, 2 or 3 (FSDP), got {config.zero_stage!r}")
    # ZeRO-2/3 with pp > 1 is allowed (FSDP + PP in torchtitan; DeepSpeed's engine refuses it): each
    # stage shards its own layers over its dp x cp group, and the price shows up in the timeline, where
    # sharded gradients are reduce-scattered after every micro-batch's backward instead of once a step.
    m = whole("microbatches", config.microbatches)
    batch = config.batch
    if isinstance(batch, bool) or not isinstance(batch, Integral) or batch < 1 or batch % (config.dp * m):
        raise ValueError(f"global_batch={batch!r} sequences must be a positive multiple of dp x microbatches "
                         f"= {config.dp * m}, so every replica gets whole micro-batches")
    one_of("schedule", config.schedule, PIPELINE_SCHEDULES)
    whole("virtual_stages", config.virtual_stages, hint=" (chunks of layers per pipeline stage)")
    if config.virtual_stages != 1 and (config.pp == 1 or config.schedule != "interleaved_1f1b"):
        raise ValueError("virtual_stages > 1 needs pp > 1 and schedule='interleaved_1f1b'")
    one_of("recompute", config.recompute, RECOMPUTE)
    one_of("dp_algorithm", config.dp_algorithm, ALGORITHMS)
    one_of("cp_method", config.cp_method, CP_METHODS)
    one_of("attention", config.attention, ATTENTION)


def _check_overlaps(config) -> None:
    """Overlap switches that only one setting has something to overlap for."""
    if config.overlap_param_gather is True and config.zero_stage not in (1, 2):
        raise ValueError(f"overlap_param_gather=True overlaps ZeRO-1/2's parameter all-gather; zero_stage="
                         f"{config.zero_stage!r} has none (ZeRO-3 gathers per layer: prefetch): use "
                         "zero_stage=1 or 2, or leave overlap_param_gather=False")
    if config.cp_local_overlap is True and config.cp_method != "all_gather":
        raise ValueError(f"cp_local_overlap=True is torch's all-gather variant; "
                         f"cp_method={config.cp_method!r} has no gather to overlap: use "
                         "cp_method='all_gather' or leave cp_local_overlap=False")


def _check_sizes_and_switches(config) -> None:
    """Bucket sizes and bytes per parameter are amounts; overlap, prefetch, sequence_parallel are booleans."""
    # Infinite buckets are meaningful (one all-reduce after the backward); NaN is not.
    amount("bucket_bytes", config.bucket_bytes, positive=True, finite=False, unit="bytes")
    amount("first_bucket_bytes", config.first_bucket_bytes, positive=True, finite=False, unit="bytes")
    for name in ("param_bytes", "grad_bytes", "optimizer_bytes"):
        amount(name, getattr(config, name), unit="bytes per parameter")
    # A string such as "no" is truthy: it would silently mean True.
    for name in ("overlap", "prefetch", "p2p_overlap", "cp_local_overlap", "overlap_param_gather"):
        if not isinstance(getattr(config, name), bool):
            raise ValueError(f"{name} must be True or False, got {getattr(config, name)!r}")
    if config.sequence_parallel is not None and not isinstance(config.sequence_parallel, bool):
        raise ValueError(f"sequence_parallel must be True, False or None (on with tp > 1), "
                         f"got {config.sequence_parallel!r}")


def _check_model_split(config) -> None:
    """tp must divide the heads and cp the sequence; a model that is not a transformer takes neither."""
    model = config.model
    if config.is_transformer:
        if model.heads % config.tp:
            raise ValueError(f"tp={config.tp} must divide the {model.heads} attention heads; "
                             "pick tp among the divisors of heads")
        if model.seq_len % config.cp:
            raise ValueError(f"cp={config.cp} must divide the sequence length {model.seq_len}")
        heads = model.heads // config.tp
        if config.cp_method == "ulysses" and heads % config.cp:
            raise ValueError(f"cp_method='ulysses' gives each of the cp={config.cp} ranks whole heads, but a "
                             f"tensor-parallel rank holds {heads} heads: use a cp that divides {heads}, or "
                             "cp_method='ring' or 'all_gather'")
    elif config.tp > 1 or config.cp > 1:
        name = getattr(model, "name", "this model")
        raise ValueError(f"{name} is too small to split with tensor or context parallelism in the "
                         "simulator: use tp=1 and cp=1, or a TransformerSpec")


def _check_stage_layers(config) -> None:
    """An explicit split names every virtual stage's layers (at least one each) and all the model's."""
    split = config.stage_layers
    if split is None:
        return
    pieces = config.pp * config.virtual_stages
    if isinstance(split, (str, bytes)) or not hasattr(split, "__len__") or len(split) != pieces:
        raise ValueError(f"stage_layers must list the layers of each of the pp x virtual_stages = {pieces} "
                         f"pieces, got {split!r}")
    for n in split:
        whole("stage_layers entry", n)
    if sum(split) != config.model.layers:
        raise ValueError(f"stage_layers must add up to the model's {config.model.layers} layers, "
                         f"got {sum(split)} from {tuple(split)!r}")


def _check_experts(config) -> None:
    """ep divides dp and the experts; the MoE options are numbers in range and switches."""
    ep, model = whole("ep", config.ep, hint=" (ranks the routed experts are spread over)"), config.model
    experts = getattr(model, "experts", None)
    if experts is None and ep > 1:
        raise ValueError(f"ep={ep} needs a mixture of experts (an MoESpec, e.g. sim.DEEPSEEK_V3); "
                         f"{getattr(model, 'name', 'this model')} has no experts: use ep=1")
    if ep > 1 and config.tp > 1:
        raise ValueError(f"ep={ep} with tp={config.tp}: the simulator does not split experts by tensor "
                         "parallelism (DeepSeek-V3 trains without TP); use tp=1 with ep > 1")
    if config.dp % ep:
        raise ValueError(f"ep={ep} must divide dp={config.dp}: the expert-parallel group is ep of the "
                         "data-parallel replicas")
    if experts is not None and experts % ep:
        raise ValueError(f"ep={ep} must divide the {experts} routed experts, so every rank holds as many")
    imbalance = amount("expert_imbalance", config.expert_imbalance, positive=True)
    if not 1 <= imbalance <= ep:
        raise ValueError(f"expert_imbalance must be between 1 (balanced) and ep={ep} (every token on one "
                         f"rank), got {imbalance!r}")
    if config.node_limit is not None:
        whole("node_limit", config.node_limit, hint=" (nodes a token may reach; None for no limit)")
    for name in ("dispatch_bytes", "combine_bytes"):
        amount(name, getattr(config, name), positive=True, unit="bytes per element")
    share = amount("comm_sm_share", config.comm_sm_share)
    if share >= 1:
        raise ValueError(f"comm_sm_share is the share of the GPU the all-to-alls take <1, got {share!r}")
    for name in ("ep_overlap", "fp8"):
        if not isinstance(getattr(config, name), bool):
            raise ValueError(f"{name} must be True or False, got {getattr(config, name)!r}")

