"""Per-layer costs of one micro-batch on one device: compute, tensor/context-parallel traffic, params.

Each pipeline piece (virtual stage) becomes a list of Blocks whose events are relative to the block start.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..collectives.cost import collective_time
from ..job.layout import dimension_link, expert_link
from ..memory.formulas import activation_memory_per_layer
from ..timeline import span
from .context_costs import AttentionCosts, attention_backward, attention_forward
from .expert_costs import append_backward, append_forward, expert_times, overlap_block


@dataclass
class Block:
    """One layer (or the output head) as the timeline shows it, for one micro-batch on one device."""

    name: str
    params: float                     # parameters this device holds for the block (after TP, before ZeRO)
    fwd: list = field(default_factory=list)   # Spans from the block's own start
    bwd: list = field(default_factory=list)
    fwd_time: float = 0.0
    bwd_time: float = 0.0


def _append(events: list, t: float, seconds: float, kind: str, label: str) -> float:
    if seconds > 0:
        events.append(span(t, t + seconds, kind, label))
    return t + seconds


class CostModel:
    """Times and sizes for a StepConfig on a Cluster (all devices of one pipeline stage are alike)."""

    def __init__(self, config, cluster):
        self.config, self.cluster = config, cluster
        c, degrees, placement = config, config.degrees, config.placement
        self.overlap_experts = c.ep_overlap and c.ep > 1
        # Overlapped all-to-alls run on SMs taken from the compute (DeepSeek-V3: 20 of 132, section 3.2.2).
        slowdown = 1 - c.comm_sm_share if self.overlap_experts else 1.0
        self.flops = cluster.preset.flops * slowdown
        self.matmul_flops = self._matmul_rate(cluster.preset) * slowdown
        self.ep_link = expert_link(cluster, degrees, placement, c.ep)
        self.tp_link = dimension_link(cluster, "tp", degrees, placement)
        self.cp_link = dimension_link(cluster, "cp", degrees, placement)
        self.pp_link = dimension_link(cluster, "pp", degrees, placement)
        self.dp_link = dimension_link(cluster, ("dp", "cp"), degrees, placement)
        self.shard_degree = c.dp * c.cp       # ZeRO shards (and gradients reduce) over dp x cp
        model, mbs = c.model, c.micro_batch_size
        self.tokens = mbs * getattr(model, "seq_len", 1)          # per micro-batch of one replica
        self.t_mem = self._memory_bound_seconds() if c.is_transformer else 0.0
        split = c.layer_split
        starts = [sum(split[:j]) for j in range(len(split))]
        self.pieces = [self._piece(j, starts[j], split[j]) for j in range(len(split))]
        self.t_p2p = self._p2p_seconds() if c.pp > 1 else 0.0
        # What a receiver waits after its sender's op: nothing more when the send blocked the sender.
        self.t_hop = self.t_p2p if c.p2p_overlap else 0.0
        if not c.p2p_overlap and c.pp > 1:
            self._block_on_sends()

    def collective(self, op: str, nbytes: float, degree: int, link, algorithm: str = "nccl") -> float:
        """Seconds of one collective of the step, as the preset's collectives run: on a calibrated
        machine the segmented ring calibrate() fitted (``preset.ring_options``), else the closed form."""
        return collective_time(op, nbytes, degree, link, algorithm,
                               **self.cluster.preset.ring_options(op, algorithm))

    def dp_collective(self, op: str, nbytes: float) -> float:
        """Seconds of one collective of the data-parallel (and ZeRO) group, with the config's algorithm."""
        return self.collective(op, nbytes, self.shard_degree, self.dp_link, self.config.dp_algorithm)

    def _matmul_rate(self, preset) -> float:
        """FLOP/s of the layers' matrix multiplies: FP8 where the config asks and the preset has it."""
        if not self.config.fp8:
            return preset.flops
        if preset.fp8_flops is None:
            raise ValueError(f"fp8=True needs a preset with an FP8 rate (fp8_flops), such as 'h800'; "
                             f"{preset.name!r} has none")
        return preset.fp8_flops

    def matmul_seconds(self, flops: float) -> float:
        return flops / self.matmul_flops

    def _p2p_seconds(self) -> float:
        """One stage-to-stage send of a micro-batch's activations (or their gradient).

        With tensor parallel each rank sends only its 1/t of them: sequence parallel's shard, or without it
        Megatron's scatter/gather, which all-gathers them over NVLink on arrival (Narayanan et al. 2021,
        section 4.1: "scatter/gather optimization").
        """
        c, model = self.config, self.config.model
        if not c.is_transformer:
            self.p2p_bytes = c.micro_batch_size * max(model.sizes) * 2
            return self.pp_link.transfer_time(self.p2p_bytes)
        act = c.micro_batch_size * (model.seq_len / c.cp) * model.hidden * 2
        self.p2p_bytes = act / c.tp
        gather = 0.0 if c.sp else self.collective("all_gather", act, c.tp, self.tp_link)
        return self.pp_link.transfer_time(self.p2p_bytes) + gather

    def _block_on_sends(self) -> None:
        """Each piece's forward ends with its send, each backward with its gradient's (blocking p2p)."""
        pieces = self.pieces
        for j, piece in enumerate(pieces):
            if j + 1 < len(pieces):
                piece[-1].fwd_time = _append(piece[-1].fwd, piece[-1].fwd_time, self.t_p2p, "comm",
                                             "send activations to the next stage")
            if j > 0:
                piece[0].bwd_time = _append(piece[0].bwd, piece[0].bwd_time, self.t_p2p, "comm",
                                            "send gradient to the previous stage")

    def _piece(self, j: int, first: int, count: int) -> list:
        c = self.config
        blocks = [self._layer(first + i) for i in range(count)]
        if c.is_transformer:
            model = c.model
            if j == 0:     # the embedding: parameters only, its lookup costs no FLOPs worth drawing
                blocks[0].params += model.embedding_params / c.tp
            if j == len(c.layer_split) - 1:
                blocks.append(self._head())
        return blocks

    def _seconds(self, flops: float) -> float:
        return flops / self.flops

    def _mlp_layer(self, index: int) -> Block:
        """One layer of an MLPSpec: its product forward, twice that backward; on a measured CPU (the
        laptop preset, ``preset.calibration``) also the bytes its weights and gradients stream through
        memory (``_streamed_mlp_seconds``)."""
        model = self.config.model
        weights = model.sizes[index] * model.sizes[index + 1]
        block = Block(f"layer {index}", float(model.layer_params(index)))
        t = self._seconds(2 * weights * self.tokens)
        read, written = self._streamed_mlp_seconds(weights)
        t_fwd = _append(block.fwd, 0.0, t, "compute", f"layer {index}")
        block.fwd_time = _append(block.fwd, t_fwd, read, "compute", f"layer {index} weights read (memory)")
        t_bwd = _append(block.bwd, 0.0, 2 * t, "compute", f"layer {index} grad")
        block.bwd_time = _append(block.bwd, t_bwd, written, "compute",
                                 f"layer {index} weights read, gradient written (memory)")
        return block

    def _streams_through_memory(self) -> bool:
        """Whether memory traffic is charged beside the MLP's matmuls: only on a measured CPU, where one
        core both streams and multiplies, so the two add (course_lib.sim.cluster.laptop). The GPU
        presets keep the compute-only MLP the chapters use."""
        preset = self.cluster.preset
        return preset.calibration is not None and preset.memory_bandwidth is not None

    def _streamed_mlp_seconds(self, weights: int) -> tuple[float, float]:
        """(forward, backward) seconds of one MLP layer's weight and gradient bytes at the measured
        memory bandwidth: the forward reads the weights; the backward reads them again (for the input's
        gradient) and writes the weight gradient, which torch DDP then copies into its all-reduce bucket
        and back (2 copies, each a read and a write: the ``gradient_as_bucket_view`` docstring of
        torch/nn/parallel/distributed.py says the flag "avoids the overhead of copying between gradients
        and allreduce communication buckets")."""
        if not self._streams_through_memory():
            return 0.0, 0.0
        c, bandwidth = self.config, self.cluster.preset.memory_bandwidth
        bucket_passes = 4 if c.dp * c.cp > 1 and c.zero_stage == 0 else 0   # 2 copies, read + write
        forward = weights * c.param_bytes
        backward = weights * (c.param_bytes + (1 + bucket_passes) * c.grad_bytes)
        return forward / bandwidth, backward / bandwidth

    def update_seconds(self, params: float) -> float:
        """Seconds of the optimizer update of ``params`` on a measured CPU: the parameters read and
        written, the gradients read, the optimizer state read and written, at the measured bandwidth
        (plain SGD keeps no state: ``optimizer_bytes=0``). Elsewhere 0: the GPU presets leave the update
        out, as the chapters' published comparisons were derived (on GPT-2's 23 ms DDP step, Adam's
        16 bytes a parameter at 3.35 TB/s would add about 1 ms: not yet charged)."""
        if not self._streams_through_memory():
            return 0.0
        c = self.config
        moved = params * (2 * c.param_bytes + c.grad_bytes + 2 * c.optimizer_bytes)
        return moved / self.cluster.preset.memory_bandwidth

    def _layer(self, index: int) -> Block:
        c, model = self.config, self.config.model
        if not c.is_transformer:
            return self._mlp_layer(index)
        share = c.tp * c.cp
        attn_flops, mlp_flops = model.layer_forward_flops(self.tokens, index)
        core_flops = model.attention_core_flops(self.tokens)
        core = self._seconds(core_flops / share)      # the attention core stays BF16 (FP8 is for matmuls)
        # The FLOP count (PaLM's, for MFU) ignores the causal mask; FlashAttention skips the masked half of
        # the scores (Dao 2023, FlashAttention-2, section 3.1.1). Selective recompute stands for it here.
        skipped = core / 2 if c.recompute == "selective" else 0.0
        t_attn = self.matmul_seconds((attn_flops - core_flops) / share) + core - skipped
        experts = expert_times(self, index)
        t_mlp = experts.compute if experts else self.matmul_seconds(mlp_flops / share)
        core -= skipped
        act_bytes = self.tokens / c.cp * model.hidden * 2
        t_tp = self.collective("all_reduce", act_bytes, c.tp, self.tp_link)
        tp_label = "TP all-gather+reduce-scatter" if c.sp else "TP all-reduce"
        attention = self._attention_costs(t_attn, core)
        t_mem = self.t_mem
        name = f"L{index}"
        held = model.layer_params(index) - model.layer_expert_params(index) * (1 - 1 / c.ep)   # E/ep experts
        block = Block(name, held / c.tp)
        overlap = self.overlap_experts and experts is not None

        def forward(events, t, tag=""):
            t = _append(events, t, t_mem, "compute", f"{name}{tag} norms, softmax, residual (memory-bound)")
            t = attention_forward(events, t, attention, f"{name}{tag}")
            t = _append(events, t, t_tp, "comm", f"{name}{tag} {tp_label}")
            if experts:
                t = append_forward(events, t, experts, f"{name}{tag}", overlap)
            else:
                t = _append(events, t, t_mlp, "compute", f"{name}{tag} MLP")
            return _append(events, t, t_tp, "comm", f"{name}{tag} {tp_label}")

        block.fwd_time = forward(block.fwd, 0.0)
        t = forward(block.bwd, 0.0, " recompute") if c.recompute == "full" else 0.0
        if c.recompute == "selective":
            t = _append(block.bwd, t, core, "compute", f"{name} recompute attention core")
        t = _append(block.bwd, t, 1.5 * t_mem, "compute", f"{name} norms, softmax, residual grad (HBM)")
        if experts:
            t = append_backward(block.bwd, t, experts, name, overlap)
        else:
            t = _append(block.bwd, t, 2 * t_mlp, "compute", f"{name} MLP grad")
        t = _append(block.bwd, t, t_tp, "comm", f"{name} {tp_label}")
        t = attention_backward(block.bwd, t, attention, name)
        block.bwd_time = _append(block.bwd, t, t_tp, "comm", f"{name} {tp_label}")
        if overlap:
            overlap_block(block, experts)
        return block

    def _attention_costs(self, t_attn: float, core: float) -> AttentionCosts:
        """One layer's attention seconds and the bytes its context-parallel group exchanges."""
        c, model = self.config, self.config.model
        kv_bytes = 2 * self.tokens * model.kv_dim * 2 / c.tp          # K and V, whole sequence, bf16
        q_bytes = self.tokens / c.cp * model.hidden * 2 / c.tp
        kv_split = (model.num_kv_heads / c.tp) % c.cp == 0
        return AttentionCosts(c.cp_method, c.cp, t_attn, core, kv_bytes, q_bytes, kv_split, self.cp_link,
                              c.cp_local_overlap)

    def _memory_bound_seconds(self) -> float:
        """Forward seconds of a layer's non-matmul ops, which stream activations through HBM.

        Each tensor Korthikanti et al. 2022 (section 4.1) count as stored is written by one op and read by
        the next: 2 x those bytes over the memory bandwidth. The backward of such an op reads its input and
        the incoming gradient and writes its own: 3 x, so 1.5 x the forward. The attention scores are
        streamed unless the attention core is recomputed (selective: FlashAttention keeps them on chip,
        Dao et al. 2022).
        """
        c, bandwidth = self.config, self.cluster.preset.memory_bandwidth
        if bandwidth is None:
            return 0.0
        kept = "selective" if c.recompute == "selective" else "none"
        streamed = activation_memory_per_layer(c.model, c.micro_batch_size, c.tp, c.sp, kept, c.cp,
                                               attention="unfused")
        return 2 * streamed / bandwidth

    def _head(self) -> Block:
        c, model = self.config, self.config.model
        block = Block("head", model.head_params / c.tp)
        if model.tied_embeddings and c.pp > 1:   # the last stage keeps its own copy of the word embedding
            block.params += model.vocab_size * model.hidden / c.tp
        share = c.tp * c.cp
        t = self._seconds(model.head_forward_flops(self.tokens) / share)   # the head stays BF16
        label = "output head + loss"
        for _ in range(getattr(model, "mtp_depth", 0)):   # DeepSeek-V3's MTP module sits with the head
            attention, mlp = model.layer_forward_flops(self.tokens)
            core, head = model.attention_core_flops(self.tokens), model.head_forward_flops(self.tokens)
            matmuls = attention - core + mlp + 2 * 2 * model.hidden ** 2 * self.tokens
            t += self.matmul_seconds(matmuls / share) + self._seconds((core + head) / share)
            label = "output head + loss + MTP module"
        block.fwd_time = _append(block.fwd, 0.0, t, "compute", label)
        block.bwd_time = _append(block.bwd, 0.0, 2 * t, "compute", "output head grad")
        return block

    def stage_params(self, stage: int) -> float:
        """Parameters one device of pipeline ``stage`` holds (after TP, before ZeRO)."""
        p = self.config.pp
        return sum(b.params for j, piece in enumerate(self.pieces) if j % p == stage for b in piece)

    def stage_times(self):
        """fwd[s][c], bwd[s][c]: seconds of one micro-batch through chunk c of stage s."""
        p, v = self.config.pp, self.config.virtual_stages
        fwd = [[sum(b.fwd_time for b in self.pieces[c * p + s]) for c in range(v)] for s in range(p)]
        bwd = [[sum(b.bwd_time for b in self.pieces[c * p + s]) for c in range(v)] for s in range(p)]
        return fwd, bwd
