"""Peak memory of every pipeline stage's devices for a whole configuration (the ZeRO calculator, with PP).

Model states from ZeRO, activations from Korthikanti et al. times the micro-batches the schedule keeps.
"""

from __future__ import annotations

import math

from ..checks import whole
from ..cluster.presets import get_preset
from ..job.config import make_config
from ..memory.formulas import MemoryBreakdown, activation_memory_per_layer, zero_memory_breakdown
from .pipeline_play import play_schedule
from .schedules import pipeline_schedule


def stage_params(config) -> list:
    """Parameters one device of each pipeline stage holds (after tensor parallel, before ZeRO)."""
    model, p, split = config.model, config.pp, config.layer_split
    if not config.is_transformer:
        out, layer = [0.0] * p, 0
        for j, count in enumerate(split):
            out[j % p] += sum(model.layer_params(layer + i) for i in range(count))
            layer += count
        return out
    out, layer = [0.0] * p, 0
    for j, count in enumerate(split):
        # a device holds E/ep of each layer's routed experts
        out[j % p] += sum(model.layer_params(i) - model.layer_expert_params(i) * (1 - 1 / config.ep)
                          for i in range(layer, layer + count))
        layer += count
    out[0] += model.embedding_params
    out[p - 1] += model.head_params
    if model.tied_embeddings and p > 1:
        out[p - 1] += model.vocab_size * model.hidden
    return [x / config.tp for x in out]


def stage_expert_params(config) -> list:
    """Routed experts' parameters one device of each stage holds (E/ep per MoE layer, after tp)."""
    out, layer, model = [0.0] * config.pp, 0, config.model
    if not config.is_transformer:
        return out
    for j, count in enumerate(config.layer_split):
        held = sum(model.layer_expert_params(i) for i in range(layer, layer + count))
        out[j % config.pp] += held / config.ep
        layer += count
    return [x / config.tp for x in out]


def _model_states(config, params: float, experts: float) -> dict:
    """ZeRO over dp x cp for the dense parameters; the experts' replicas are dp x cp / ep apart."""
    sizes = (config.param_bytes, config.grad_bytes, config.optimizer_bytes)
    dense = zero_memory_breakdown(params - experts, config.dp * config.cp, config.zero_stage, *sizes)
    expert = zero_memory_breakdown(experts, config.dp * config.cp // config.ep, config.zero_stage, *sizes)
    return {key: dense[key] + expert[key] for key in dense}


def peak_chunks_in_flight(config) -> list:
    """Per stage, the most chunk-micro-batches whose activations are held at once.

    A stage's count depends only on its own op order, so it is read off the schedules' warm-up lengths
    (pipeline.py) in closed form; tests/sim/test_estimate.py checks it against playing the schedule.
    """
    p, m, v = config.pp, config.microbatches, config.virtual_stages
    kind = config.pipeline_kind
    if kind == "gpipe":
        return [m] * p
    if kind == "1f1b":
        return [min(p - s, m) for s in range(p)]
    total = m * v
    warmups = [total if m == p else min((p - s - 1) * 2 + (v - 1) * p, total) for s in range(p)]
    return [min(w + 1, total) for w in warmups]


def played_peak_chunks_in_flight(config) -> list:
    """The same count, by playing the whole schedule (slow for many micro-batches; the tests' reference)."""
    schedule = pipeline_schedule(config.pipeline_kind, config.pp, config.microbatches, config.virtual_stages)
    ones = [[1.0] * config.virtual_stages for _ in range(config.pp)]
    return play_schedule(schedule, ones, ones)[1]


def plan_memory(config, capacity: float | None = None) -> list:
    """One MemoryBreakdown per pipeline stage (every device of a stage holds the same)."""
    model, p = config.model, config.pp
    per_layer = activation_memory_per_layer(model, config.micro_batch_size, config.tp, config.sp,
                                            config.recompute, config.cp, config.attention)
    split = config.layer_split
    peaks = peak_chunks_in_flight(config)
    out = []
    per_stage = zip(stage_params(config), stage_expert_params(config), strict=True)
    for s, (params, experts) in enumerate(per_stage):
        states = _model_states(config, params, experts)
        layers_per_chunk = max(split[j] for j in range(s, len(split), p))
        activations = peaks[s] * layers_per_chunk * per_layer
        if config.recompute == "full":   # the layer being recomputed holds its full activations
            activations += activation_memory_per_layer(model, config.micro_batch_size, config.tp, config.sp,
                                                       "none", config.cp, config.attention)
        if config.is_transformer and s == p - 1:   # fp32 logits of one micro-batch for the loss
            tokens = config.micro_batch_size * model.seq_len / config.cp
            activations += tokens * model.vocab_size / config.tp * 4
        buffers = 0.0
        if config.zero_stage == 3:   # two gathered layers (current + prefetched) and one unsharded gradient
            biggest = max(map(model.layer_params, range(model.layers))) if config.is_transformer else max(
                model.layer_params(i) for i in range(model.layers))
            buffers = biggest / config.tp * (2 * config.param_bytes + config.grad_bytes)
        out.append(MemoryBreakdown(activations=activations, buffers=buffers, capacity=capacity, **states))
    return out


def memory_per_device(model, dp: int = 1, tp: int = 1, pp: int = 1, cp: int = 1, zero_stage: int = 0,
                      microbatches: int = 1, global_batch: int | None = None, preset=None, **options) -> list:
    """Peak bytes per device, one MemoryBreakdown per pipeline stage, without simulating the step.

    ``preset`` (a name or HardwarePreset) sets the capacity each breakdown is checked against: its
    memory less the reserve it keeps for the CUDA context, NCCL's buffers and fragmentation.
    """
    # The degrees multiply into the world size, so check them first (None * 2 would be a TypeError).
    world = math.prod(whole(name, value) for name, value in (("dp", dp), ("tp", tp), ("pp", pp), ("cp", cp)))
    config = make_config(model, world, dp=dp, tp=tp, pp=pp, cp=cp, zero_stage=zero_stage,
                         microbatches=microbatches, global_batch=global_batch, **options)
    capacity = get_preset(preset).usable_memory if preset is not None else None
    return plan_memory(config, capacity)
