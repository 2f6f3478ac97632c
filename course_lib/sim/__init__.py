"""Virtual-clock cluster simulator: collectives, pipelines, memory and whole training steps, 0D to 4D.

Plain Python (no torch, no matplotlib); every time is in seconds of a virtual clock, every size in bytes.
Sub-packages, in the order a step flows: job, cluster, collectives, memory, step, search; devices holds the
message-level simulated GPU. Every public name is imported here: import from course_lib.sim.
"""

from .cluster.hardware import HardwarePreset, Link
from .cluster.laptop import (
    WITHIN,
    Calibration,
    breakdown_lines,
    compute_slowdown,
    lane_breakdown,
    laptop_preset,
    prediction_line,
    python_hop_time,
    shared_core_finish_times,
)
from .cluster.pods import PodNetwork
from .cluster.presets import (
    A100,
    H100,
    H800,
    LAPTOP_CPU,
    LLAMA3_24K,
    NETWORKS,
    PRESETS,
    get_network,
    get_preset,
    preset_from_measurements,
)
from .cluster.topology import Cluster, make_cluster
from .collectives.buckets import (
    all_reduce_terms,
    bucketed_overhead,
    buckets_after_backward,
    latency_seconds,
    latency_share,
    optimal_bucket_bytes,
)
from .collectives.context_parallel import (
    ContextParallelCost,
    causal_step_work,
    causal_work,
    context_parallel_cost,
    ring_attention_timeline,
)
from .collectives.cost import (
    ALGORITHM_OPS,
    ALGORITHMS,
    NCCL_CHOICES,
    OPS,
    algorithm_bandwidth,
    bus_bandwidth,
    bus_factor,
    collective_time,
    nccl_algorithm,
    rabenseifner_all_reduce,
    ring_segments,
)
from .collectives.expert_traffic import ExpertTraffic, expert_all_to_all_time, expert_traffic
from .collectives.timelines import (
    collective_timeline,
    parameter_server_timeline,
    ring_timeline,
    tree_timeline,
)
from .collectives.traffic import zero_traffic_per_device
from .devices.examples_0d_1d import seed_0d, seed_1d
from .devices.examples_2d_to_4d import seed_nd
from .devices.simulated_gpu import SimulatedGPU, SimulatedNetwork, simulated_gpus
from .job.config import StepConfig
from .job.flops import hardware_flops, megatron_2021_flops, model_flops, utilization
from .job.layout import LLAMA3_ORDER, MEGATRON_CORE_ORDER, PLACEMENTS
from .job.model_specs import (
    COURSE_MLP,
    GPT3_175B,
    LLAMA3_8B,
    LLAMA3_70B,
    LLAMA3_405B,
    MODELS,
    MLPSpec,
    TransformerSpec,
)
from .job.moe import DEEPSEEK_V3, MoESpec, mla_attention_params
from .job.strategies import STRATEGIES, strategy
from .memory.formulas import (
    MemoryBreakdown,
    OutOfMemoryError,
    activation_memory_per_layer,
    zero_memory_breakdown,
    zero_memory_per_device,
)
from .network.group_links import GroupLink
from .search.published import (
    DEEPSEEK_V3_RUN,
    PUBLISHED_RUNS,
    PublishedRun,
    ends_lighter,
    gpu_hours_per_trillion_tokens,
    mfu_from_gpu_hours,
    simulate_published,
)
from .search.search import format_layouts, search_layouts
from .search.wall_clock import WallClock, wall_clock_hours
from .step.expert_layer import expert_layer_timeline
from .step.memory_plan import memory_per_device
from .step.pipeline_play import simulate_pipeline
from .step.schedules import Schedule, bubble_fraction_formula, pipeline_schedule
from .step.step_report import StepReport
from .step.training_step import simulate_training_step
from .timeline import Event, Span, Timeline, join_timelines
from .vocabulary import CP_METHODS

__all__ = [
    "WITHIN", "Calibration", "breakdown_lines", "compute_slowdown", "lane_breakdown", "laptop_preset",
    "prediction_line", "python_hop_time", "shared_core_finish_times",
    "A100", "activation_memory_per_layer", "algorithm_bandwidth", "ALGORITHMS", "nccl_algorithm",
    "bubble_fraction_formula", "bus_bandwidth", "bus_factor", "Cluster", "collective_time",
    "collective_timeline", "COURSE_MLP", "Event", "get_preset", "GPT3_175B", "H100", "HardwarePreset",
    "LAPTOP_CPU", "Link", "LLAMA3_405B", "LLAMA3_70B", "LLAMA3_8B", "make_cluster", "memory_per_device",
    "MemoryBreakdown", "MLPSpec", "MODELS", "OPS", "OutOfMemoryError", "parameter_server_timeline",
    "pipeline_schedule", "preset_from_measurements", "PRESETS", "ring_segments", "ring_timeline", "Schedule",
    "search_layouts", "seed_0d", "seed_1d", "seed_nd", "simulate_pipeline", "simulate_training_step",
    "simulated_gpus", "SimulatedGPU", "SimulatedNetwork", "StepConfig", "StepReport", "STRATEGIES",
    "strategy", "Timeline", "TransformerSpec", "tree_timeline", "zero_memory_breakdown",
    "zero_memory_per_device", "zero_traffic_per_device", "ALGORITHM_OPS", "NCCL_CHOICES", "GroupLink",
    "format_layouts", "PodNetwork", "LLAMA3_24K", "NETWORKS", "get_network",
    "PUBLISHED_RUNS", "PublishedRun", "ends_lighter", "simulate_published", "Span", "H800", "MoESpec",
    "DEEPSEEK_V3", "mla_attention_params", "ExpertTraffic", "expert_traffic", "expert_all_to_all_time",
    "DEEPSEEK_V3_RUN", "gpu_hours_per_trillion_tokens", "mfu_from_gpu_hours", "wall_clock_hours",
    "WallClock", "expert_layer_timeline",
    "all_reduce_terms", "buckets_after_backward", "bucketed_overhead", "latency_seconds", "latency_share",
    "optimal_bucket_bytes", "join_timelines", "rabenseifner_all_reduce",
    "causal_step_work", "causal_work", "context_parallel_cost", "ContextParallelCost", "CP_METHODS",
    "ring_attention_timeline", "hardware_flops",
    "megatron_2021_flops", "model_flops", "utilization", "LLAMA3_ORDER", "MEGATRON_CORE_ORDER", "PLACEMENTS",
]
