"""Published production training runs with the settings their papers give, to hold the simulator's MFU to.

Every setting is stated beside its source; where a paper leaves one open, the choice and its reason are named.
Each run keeps the paper's own figures (TFLOP/s per GPU and MFU, as printed; None where the paper prints
none) and, apart, the factor that converts them to the simulator's FLOP count (PaLM's model FLOPs) with the
assumption that factor rests on. A figure derived from a paper's (DeepSeek-V3's MFU from its GPU-hours) is
never stored as the paper's: ``derived_mfu`` computes it and ``derivation`` says how.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..cluster.presets import get_preset
from ..job.flops import megatron_2021_flops, model_flops
from ..job.layout import LLAMA3_ORDER
from ..job.model_specs import LLAMA3_405B, TransformerSpec
from ..job.moe import DEEPSEEK_V3

# Megatron-LM's largest weak-scaling model (Narayanan et al. 2021, arXiv 2104.04473, Table 1): 128 layers,
# hidden 25,600, 160 heads, 2,048-token sequences, 51,200-token vocabulary (section 5.1).
MEGATRON_1T = TransformerSpec(128, 25600, 160, 2048, 51200, name="Megatron 1T")

LLAMA_BATCH = 16 * 2**20 // 8192     # Llama 3: 16M tokens per step of 8,192-token sequences


def ends_lighter(layers: int, pp: int, virtual_stages: int = 1, fewer: int = 1) -> tuple:
    """Layers per virtual stage with ``fewer`` layers taken off the first and the last one.

    Llama 3 (Dubey et al. 2024, arXiv 2407.21783, section 3.3.2, "balanced pipeline schedule"): the first
    stage also holds the embedding and the last one the output layer and loss, so each gets a layer less.
    """
    pieces = pp * virtual_stages
    base, extra = divmod(layers + 2 * fewer, pieces)
    split = [base + (1 if j < extra else 0) for j in range(pieces)]
    split[0] -= fewer
    split[-1] -= fewer
    if min(split) < 1:
        raise ValueError(f"{layers} layers over {pieces} pieces leave no layer on an end stage; use fewer=0")
    return tuple(split)


@dataclass(frozen=True)
class PublishedRun:
    """One production run: the model, the cluster, the layout and what the paper measured."""

    name: str
    model: object
    preset: str
    gpus: int
    layout: dict                 # simulate_training_step keyword arguments
    paper_tflops: float | None   # FLOP/s per GPU, as the paper prints it (its own FLOP count); None: none
    paper_mfu: float | None      # MFU as the paper prints it (a fraction); None where it prints none
    to_model_flops: float        # the paper's FLOP count -> the simulator's (PaLM's model FLOPs)
    conversion: str              # what that factor assumes
    source: str
    notes: list = field(default_factory=list)
    # Where the paper gives GPU-hours per trillion tokens instead: wall-clock time over the whole
    # pre-training (ramp, restarts, checkpoints, evaluation included), not a step time (wall_clock.py).
    published_gpu_hours_per_trillion_tokens: float | None = None
    derivation: str = ""         # how derived_mfu is derived, where the paper prints no MFU

    @property
    def model_flops_mfu(self) -> float | None:
        """The paper's rate in the simulator's count, over the peak: what simulate_published's MFU meets.
        None where the paper prints no rate (see derived_mfu)."""
        if self.paper_tflops is None:
            return None
        return self.paper_tflops * self.to_model_flops / get_preset(self.preset).mfu_flops

    @property
    def derived_mfu(self) -> float | None:
        """Derived, not published: the MFU the paper's GPU-hours would mean if every GPU-hour were a steady
        training step, with the simulator's FLOPs per token (``derivation`` says so)."""
        if self.published_gpu_hours_per_trillion_tokens is None:
            return None
        return mfu_from_gpu_hours(self.published_gpu_hours_per_trillion_tokens, self.model,
                                  get_preset(self.preset).mfu_flops)


def causal_to_model_flops(model) -> float:
    """Factor from FLOPs that count the causal attention at half (the scores a causal FlashAttention
    computes) to the simulator's count, which counts them whole as PaLM and torchtitan do."""
    return model_flops(model, model.seq_len) / model_flops(model, model.seq_len, attention="causal half")


LLAMA_CONVERSION = ("assumes Meta counted causal attention at half (the paper does not say how it counted); "
                    "counted whole, as PaLM and torchtitan count, the factor would be 1")


# Llama 3 405B (Dubey et al. 2024, Table 4): TP 8, CP 1, PP 16, 8,192-token sequences, 16M tokens a step;
# 8,192 GPUs (DP 64): 430 TFLOP/s per GPU, 43% BF16 MFU; 16,384 GPUs (DP 128): 400 TFLOP/s, 41%.
# Section 3.3.2: FSDP shards optimizer states and gradients and does not reshard the parameters after the
# forward (the simulator's ZeRO stage 2); the first and last stages hold a layer less; an interleaved
# schedule whose number of chunks V the paper does not give. The paper names no full recomputation; we take
# selective (the attention core, which FlashAttention recomputes inside its backward anyway).
_LLAMA_NOTES = ["FSDP sharding optimizer states and gradients, not parameters: zero_stage=2 (section 3.3.2)",
                "first and last stage one layer lighter (section 3.3.2)",
                "selective recomputation (the paper names no full recomputation)",
                "published TFLOP/s taken to count causal attention, converted to the simulator's count "
                "(causal_to_model_flops)"]
LLAMA3_8K = PublishedRun(
    "Llama 3 405B on 8,192 H100", LLAMA3_405B, "h100", 8192,
    dict(dp=64, tp=8, pp=16, cp=1, microbatches=32, global_batch=LLAMA_BATCH, zero_stage=2,
         recompute="selective", schedule="1f1b", stage_layers=ends_lighter(126, 16)),
    430e12, 0.43, causal_to_model_flops(LLAMA3_405B), LLAMA_CONVERSION,
    "Dubey et al. 2024, arXiv 2407.21783, Table 4: 430 TFLOP/s per GPU, 43% MFU",
    _LLAMA_NOTES + ["1F1B: with 32 micro-batches any interleaving overflows 80 GB in the simulator, since "
                    "it multiplies the first stage's activations by 1 + (p-1)/(p V) (Korthikanti et al. "
                    "2022, section 4.2.3)"])
LLAMA3_16K = PublishedRun(
    "Llama 3 405B on 16,384 H100", LLAMA3_405B, "h100", 16384,
    dict(dp=128, tp=8, pp=16, cp=1, microbatches=16, global_batch=LLAMA_BATCH, zero_stage=2,
         recompute="selective", schedule="interleaved_1f1b", virtual_stages=2,
         stage_layers=ends_lighter(126, 16, 2)),
    400e12, 0.41, causal_to_model_flops(LLAMA3_405B), LLAMA_CONVERSION,
    "Dubey et al. 2024, arXiv 2407.21783, Table 4: 400 TFLOP/s per GPU, 41% MFU",
    _LLAMA_NOTES + ["interleaved schedule, V=2 (the paper gives no V; 2 is the smallest)"])

# Llama 3 405B's long-context stage (Dubey et al. 2024, Table 4, third row): 16,384 GPUs as TP 8, CP 16,
# PP 16, DP 8 (8 x 16 x 16 x 8 = 16,384), 131,072-token sequences, 16 per DP replica (16M tokens a step),
# 380 TFLOP/s per GPU, 38% MFU. Section 3.3.2: all-gather based context parallelism (K and V all-gathered,
# attention computed for the local Q chunk; the all-gather "exposed in the critical path", adopted because
# GQA keeps K and V small), which is how the simulator costs cp (step/context_costs.py); the dimensions
# ordered [TP, CP, PP, DP] from the innermost, the placement below.
LLAMA3_405B_128K = replace(LLAMA3_405B, seq_len=131072, name="Llama 3 405B, 128K context")
LLAMA3_128K = PublishedRun(
    "Llama 3 405B, 128K context, on 16,384 H100", LLAMA3_405B_128K, "h100", 16384,
    dict(dp=8, tp=8, pp=16, cp=16, microbatches=16, global_batch=8 * 16, zero_stage=2,
         recompute="selective", schedule="interleaved_1f1b", virtual_stages=2,
         stage_layers=ends_lighter(126, 16, 2), placement=LLAMA3_ORDER),
    380e12, 0.38, causal_to_model_flops(LLAMA3_405B_128K), LLAMA_CONVERSION,
    "Dubey et al. 2024, arXiv 2407.21783, Table 4: 380 TFLOP/s per GPU, 38% MFU",
    _LLAMA_NOTES + ["all-gather based context parallelism over 16 ranks (section 3.3.2)",
                    "interleaved schedule, V=2 as for the 16,384-GPU 8K run (the paper gives no V)",
                    "the conversion matters most here: at 128K the scores are 57% of PaLM's count"])

# Megatron 1T (Narayanan et al. 2021, Table 1): TP 8, PP 64, 3,072 A100 (DP 6), batch 3,072 sequences,
# 163 TFLOP/s per GPU = 52% of the 312 TFLOP/s peak. Their FLOP count (section 5.1, eq. 3) includes the
# full recomputation they used, 96 B s l h^2 (1 + s/6h + V/16lh); the simulator counts the model FLOPs
# without it (72 B s l h^2 (1 + s/6h + V/12lh)), so the published rate is converted:
# 163 TFLOP/s x model / counted FLOPs = 122 TFLOP/s, 39.2% of peak.
# What the simulator long missed here was not the matmul rate: Korthikanti et al. 2022 (arXiv 2205.05198,
# abstract) reached 54.2% model-FLOPs MFU on 2,240 A100 for a 530B model of the same family, which a
# sustained matmul rate low enough to explain this run (about 66% of peak) could not. It was the
# non-matmul work of 2021's layer: without sequence parallelism every TP rank runs the norms, dropouts and
# residual adds on the whole s x h activation, and the s x s attention scores go through HBM (softmax,
# dropout). presets.py now gives each GPU its memory bandwidth and costs.py charges that streaming: the
# simulator went from 5.5 to about 3.5 points above the published figure (tests/sim/test_published.py).
MEGATRON_1T_RUN = PublishedRun(
    "Megatron-LM 1T on 3,072 A100", MEGATRON_1T, "a100", 3072,
    dict(dp=6, tp=8, pp=64, cp=1, microbatches=512, global_batch=3072, zero_stage=0, recompute="full",
         schedule="1f1b", sequence_parallel=False, overlap=False, p2p_overlap=False),
    163e12, 0.52, model_flops(MEGATRON_1T, MEGATRON_1T.seq_len) / megatron_2021_flops(MEGATRON_1T, 1),
    "the paper's eq. (3) counts the forward its full recomputation repeats (hardware FLOPs); the model's "
    "FLOPs are 3/4 of those",
    "Narayanan et al. 2021, arXiv 2104.04473, Table 1: 163 TFLOP/s per GPU, 52% of peak with recomputation",
    ["full recomputation, counted by the paper's FLOP formula and converted to model FLOPs (section 5.1)",
     "no sequence parallelism (it came in 2022): norms, dropouts and residual adds run on every TP rank, "
     "and the attention scores are written to HBM (no FlashAttention in 2021)",
     "the gradient all-reduce after the backward; pipeline sends that block both stages (Megatron-LM's "
     "p2p_communication.py waits on batch_isend_irecv, then torch.cuda.synchronize()), 1/8 of each "
     "activation per TP rank (the scatter/gather optimization, section 4.1)",
     "micro-batches of one sequence, 1F1B. Section 5.1 says the runs used the interleaved schedule, "
     "without giving V; with 2 layers per stage only V=2 is possible, which the simulator plays 2 points "
     "faster still: what remains of the gap is work it does not see, not a setting"])

PUBLISHED_RUNS = (LLAMA3_8K, LLAMA3_16K, LLAMA3_128K, MEGATRON_1T_RUN)


def gpu_hours_per_trillion_tokens(report) -> float:
    """GPU-hours one trillion tokens take at ``report``'s step time (a StepReport)."""
    return report.step_time * report.cluster.world_size / 3600 * 1e12 / report.tokens


def mfu_from_gpu_hours(gpu_hours_per_trillion: float, model, peak_flops: float) -> float:
    """The MFU a GPU-hours figure means: tokens per GPU-second x training FLOPs per token / peak."""
    return 1e12 / (gpu_hours_per_trillion * 3600) * model.training_flops(1) / peak_flops


# DeepSeek-V3 (DeepSeek-AI 2024, arXiv 2412.19437). Section 1 and Table 1: 180K H800 GPU-hours per trillion
# pre-training tokens (2,664K for 14.8T). Section 3.1-3.2: 2,048 H800 in nodes of 8 (NVLink inside, one
# InfiniBand NIC per GPU across), PP 16 with DualPipe, EP 64 over 8 nodes, ZeRO-1 data parallelism, no TP;
# the all-to-alls overlap computation (DualPipe pairs a forward with a backward chunk) on 20 of the 132 SMs;
# each token reaches at most 4 nodes. Section 3.3: FP8 matrix multiplies (forward, input and weight
# gradients); embedding, output head, gating, norms and attention stay BF16/FP32; the dispatch is sent in
# FP8, the combine in BF16. Section 3.3.4: BF16 AdamW moments, FP32 master weights and gradients. Section
# 4.2: 4K-token sequences, 15,360 of them per step (after a ramp over the first 469B tokens).
DEEPSEEK_BATCH = 15360
DEEPSEEK_GPU_HOURS = 180e3
# The report gives no split of the 61 layers over the 16 stages: the last stage also runs the output head
# and the MTP module (their forward is about four layers' worth in the simulator), so it gets one layer and
# every other stage four: the most even split there is. No micro-batch size either: one sequence each.
DEEPSEEK_SPLIT = (4,) * 15 + (1,)
DEEPSEEK_V3_RUN = PublishedRun(
    "DeepSeek-V3 on 2,048 H800", DEEPSEEK_V3, "h800", 2048,
    dict(dp=128, pp=16, ep=64, zero_stage=1, microbatches=DEEPSEEK_BATCH // 128, global_batch=DEEPSEEK_BATCH,
         schedule="1f1b", stage_layers=DEEPSEEK_SPLIT, recompute="selective", fp8=True, node_limit=4,
         dispatch_bytes=1, combine_bytes=2, ep_overlap=True, comm_sm_share=20 / 132, param_bytes=2,
         grad_bytes=4, optimizer_bytes=4 + 2 + 2, check_memory=False),
    None, None, 1.0,
    "the report prints GPU-hours, not a FLOP rate or an MFU: nothing to convert",
    "DeepSeek-AI 2024, arXiv 2412.19437, section 1 and Table 1: 180K H800 GPU-hours per trillion tokens",
    ["FP8 matrix multiplies at 75% of the H800's 1,979 TFLOP/s FP8 peak (the course's GEMM efficiency, "
     "not a measurement); attention core, output head and MTP head at the BF16 rate (section 3.3.1)",
     "links as the report states them (it does not measure them): NVLink 160 GB/s, InfiniBand 50 GB/s "
     "per GPU (section 3.2.2)",
     "EP 64 inside DP 128 (each stage's 128 GPUs, two expert replicas), ZeRO-1, PP 16 (section 3.2)",
     "dispatch in FP8, combine in BF16 (section 3.3.3); at most 4 nodes per token (section 3.2.2)",
     "all-to-alls overlapped with compute, which keeps 112 of the 132 SMs (section 3.2.2)",
     "1F1B in place of DualPipe, which the simulator does not play: DualPipe's bubble is smaller "
     "(Table 2), so this errs towards slower",
     "the last stage holds one layer beside the output head and the MTP module, the others four "
     "(the report gives no split)",
     "balanced routing: every expert gets as many tokens",
     "memory not checked: the simulator counts BF16 activations (Korthikanti et al. 2022) and knows "
     "neither the FP8 caching of activations (section 3.3.3) nor the recomputation of RMSNorm and the MLA "
     "up-projections (section 3.2.3)",
     "180K GPU-hours per trillion tokens is wall-clock time over the whole pre-training: the batch ramp "
     "from 3,072 to 15,360 sequences over the first 469B tokens (section 4.2), restarts, checkpoints and "
     "evaluation; a step time contains none of them (wall_clock.py)"],
    DEEPSEEK_GPU_HOURS,
    "derived, not published: 180K GPU-hours per trillion tokens read as steady training steps, with the "
    "simulator's model FLOPs per token, over the 989 TFLOP/s BF16 peak (mfu_from_gpu_hours)")


def simulate_published(run: PublishedRun):
    """simulate_training_step of ``run`` on its cluster (nodes of 8 GPUs), with its published settings."""
    from ..cluster.topology import make_cluster
    from ..step.training_step import simulate_training_step

    cluster = make_cluster(run.gpus // 8, 8, preset=run.preset)
    return simulate_training_step(run.model, cluster, **run.layout)
