"""Named hardware presets (a node of GPUs or a laptop CPU), each with the source of its numbers.

Sustained FLOP/s: measured for the H100 (MEASURED_GEMM), chosen for the others, stated beside each preset;
``peak_flops`` is the data-sheet figure MFU uses.
"""

from __future__ import annotations

from dataclasses import dataclass

from .hardware import HardwarePreset, Link
from .pods import PodNetwork

# GEMM efficiency: the share of the data-sheet peak a large BF16 matrix multiply sustains. The layers'
# matrix multiplies run at it; non-matmul layers are costed apart, at ``memory_bandwidth``.


@dataclass(frozen=True)
class GemmMeasurement:
    """One measured BF16 GEMM throughput: the device, the date, the script and what it printed."""

    device: str
    date: str
    script: str
    flops: float          # FLOP/s, the median over the measured products
    peak_flops: float     # the device's data-sheet dense BF16 peak
    note: str = ""

    @property
    def efficiency(self) -> float:
        return self.flops / self.peak_flops


# H100: measured (benchmarks/README.md, last section): median 710 TFLOP/s over the 15 forward and backward
# products of Llama 3 405B's layer and output head on one of 8 tensor-parallel ranks (M = 8,192 tokens),
# 71.8% of the 989 TFLOP/s peak, range 592-749 TFLOP/s (60-76%).
MEASURED_GEMM = GemmMeasurement(
    device="NVIDIA H100 80GB HBM3 (SXM, 132 SMs, 700 W)", date="2026-11-28",
    script="benchmarks/bench_gemm_gpu.py (torch 2.11.0+cu130, CUDA events, median of 30 after 5 warm-ups)",
    flops=710e12, peak_flops=989e12,
    note="Llama 3 405B's TP-8 shapes, forward and both backward products; range 60-76% of peak")
H100_GEMM_EFFICIENCY = MEASURED_GEMM.efficiency

# A100 and H800 (BF16 and FP8): chosen, not measured: 75% of the data-sheet peak, about the H100's measured
# upper range. A bound on it for the A100: Korthikanti et al. 2022 (arXiv 2205.05198, abstract) reached
# 54.2% MFU end to end on 2,240 A100 (530B model), bubble and communication included, so the matmuls
# themselves ran well above that. `dataclasses.replace(preset, flops=...)` changes it.
GEMM_EFFICIENCY = 0.75

# Per-hop latencies of NCCL's own cost model (src/graph/tuning.cc, hwLat, ring, Simple protocol):
# 3.4 us for an NVLink hop, 14 us for a network hop. NCCL tunes its algorithm choice with them.
NVLINK_HOP_LATENCY = 3.4e-6
NETWORK_HOP_LATENCY = 14e-6

# Bandwidths below are line rates from data sheets. What NCCL measures is lower, and the unit tests
# compare the model with these published bus bandwidths:
# - NVLink 4 inside a DGX H100: ~370 GB/s busbw for a ring ("450GB/s is the line rate. With the protocol
#   overhead (~20%) NCCL can get an effective NVLink bandwidth of 370GB/s", NVIDIA/nccl-tests#212);
# - NDR InfiniBand: "For NDR @ 400Gbps you should see 46-48GB/s per NIC" (NVIDIA/nccl-tests#290), so
#   two DGX H100 (8 NICs each) reach about 8 x 46-48 = 368-384 GB/s all-reduce busbw with the ring.
NCCL_MEASURED_BUSBW = {"h100_nvlink_ring": 370e9, "ndr_per_nic": (46e9, 48e9)}

# What a GPU's memory holds besides the training state (the memory plans keep it free: a layout that needs
# 79.8 of 80 GB does not fit). It is a stated assumption of 4 GB (5% of 80 GB), made of: the CUDA context
# and library workspaces (a process shows ~0.8 GB in nvidia-smi before its first tensor,
# pytorch/pytorch#34323; torch.cuda.memory_allocated's documentation names "some context" it does not
# count); NCCL's buffers, NCCL_BUFFSIZE (4 MiB by default, NCCL's environment-variable documentation) per
# channel and peer of every communicator, which a job with TP, PP and DP groups multiplies; and the
# caching allocator's fragmentation (the ZeRO paper, section 3.2, saw out-of-memory errors with over 30%
# of memory free in extreme cases).
GPU_MEMORY_RESERVE = 4e9

# Each preset spells out every field (the same shape twice, on purpose) so each number sits beside its
# data-sheet source rather than being derived from another GPU's.
H100 = HardwarePreset(
    name="h100",
    flops=H100_GEMM_EFFICIENCY * 989e12,   # measured: MEASURED_GEMM
    peak_flops=989e12,
    memory_bytes=80e9,
    # NVLink 4: 900 GB/s per GPU counting both directions, so 450 GB/s each way.
    intra_node=Link(latency=NVLINK_HOP_LATENCY, bandwidth=450e9),
    # One ConnectX-7 NDR InfiniBand port (400 Gb/s = 50 GB/s) per GPU: 8 per node, rail-optimised.
    inter_node=Link(latency=NETWORK_HOP_LATENCY, bandwidth=50e9),
    nics_per_node=8,
    memory_bandwidth=3.35e12,   # HBM3, H100 SXM data sheet: 3.35 TB/s
    memory_reserve=GPU_MEMORY_RESERVE,
    source="NVIDIA DGX H100 data sheet: 8x H100 SXM 80 GB, 989 TFLOP/s dense BF16 (matmuls at the 71.8% "
           "measured by benchmarks/bench_gemm_gpu.py on one H100 SXM, 2026-11-28), NVLink 4 "
           "900 GB/s per GPU, 8x ConnectX-7 400 Gb/s (one per GPU) for compute traffic; per-hop "
           "latencies from NCCL's tuning model (src/graph/tuning.cc: 3.4 us NVLink, 14 us network)",
)

A100 = HardwarePreset(
    name="a100",
    flops=GEMM_EFFICIENCY * 312e12,   # chosen, not measured
    peak_flops=312e12,
    memory_bytes=80e9,
    # NVLink 3: 600 GB/s per GPU counting both directions.
    intra_node=Link(latency=NVLINK_HOP_LATENCY, bandwidth=300e9),
    # One ConnectX-6 HDR InfiniBand port (200 Gb/s = 25 GB/s) per GPU: 8 per node, rail-optimised.
    inter_node=Link(latency=NETWORK_HOP_LATENCY, bandwidth=25e9),
    nics_per_node=8,
    memory_bandwidth=2.039e12,  # HBM2e, A100 80 GB SXM data sheet: 2,039 GB/s
    memory_reserve=GPU_MEMORY_RESERVE,
    source="NVIDIA DGX A100 data sheet: 8x A100 SXM 80 GB, 312 TFLOP/s dense BF16, NVLink 3 "
           "600 GB/s per GPU, 8x ConnectX-6 200 Gb/s (one per GPU) for compute traffic; per-hop "
           "latencies from NCCL's tuning model (src/graph/tuning.cc: 3.4 us NVLink, 14 us network)",
)

# H800 SXM: the H100 SXM's Hopper die (132 SMs, as the DeepSeek-V3 report counts them, arXiv 2412.19437,
# section 3.2.2; the H100's 989 TFLOP/s dense BF16 and, H100 SXM data sheet, 1,979 dense FP8) with its NVLink
# cut to 400 GB/s counting both directions. The links are what DeepSeek measured on their H800 cluster
# (same section): "NVLink offers a bandwidth of 160 GB/s, roughly 3.2 times that of IB (50 GB/s)", one
# 400 Gb/s InfiniBand NIC per GPU. Memory: 80 GB of HBM3 at 3.35 TB/s, as the H100 SXM.
H800 = HardwarePreset(
    name="h800",
    flops=GEMM_EFFICIENCY * 989e12,   # chosen, not measured (as the FP8 rate below)
    peak_flops=989e12,
    memory_bytes=80e9,
    intra_node=Link(latency=NVLINK_HOP_LATENCY, bandwidth=160e9),
    inter_node=Link(latency=NETWORK_HOP_LATENCY, bandwidth=50e9),
    nics_per_node=8,
    memory_bandwidth=3.35e12,
    fp8_flops=GEMM_EFFICIENCY * 1979e12,
    fp8_peak_flops=1979e12,
    source="H800 SXM = H100 SXM compute (989 TFLOP/s dense BF16, 1,979 dense FP8, 132 SMs) with NVLink cut "
           "to 400 GB/s; links as DeepSeek-V3 measured them (arXiv 2412.19437, section 3.2.2): NVLink 160 "
           "GB/s, InfiniBand 50 GB/s per GPU; NCCL's per-hop latencies (src/graph/tuning.cc)",
)

LAPTOP_CPU = HardwarePreset(
    name="laptop_cpu",
    flops=100e9,
    peak_flops=200e9,
    memory_bytes=16e9,
    # Processes on one machine talk through loopback TCP (gloo): a few GB/s, tens of microseconds.
    intra_node=Link(latency=30e-6, bandwidth=3e9),
    # Two laptops on gigabit Ethernet: one port per machine, whatever the number of processes.
    inter_node=Link(latency=100e-6, bandwidth=125e6),
    nics_per_node=1,
    source="order-of-magnitude assumption for a 4-8 core laptop (AVX2 fp32) and 1 Gb/s Ethernet; "
           "course_lib.real.calibrate() measures the real machine",
)

PRESETS: dict[str, HardwarePreset] = {p.name: p for p in (H100, A100, H800, LAPTOP_CPU)}

# The tier above the node (pods.py). Llama 3's 24K-GPU H100 cluster (Dubey et al. 2024, arXiv 2407.21783,
# section 3.3.1, "Network topology"): RoCE, a three-layer Clos; 16 GPUs per rack on one top-of-rack switch,
# 192 racks joined by cluster switches into "a pod of 3,072 GPUs with full bisection bandwidth", eight pods
# joined by aggregation switches into 24K GPUs, that layer "has an oversubscription ratio of 1:7". Its
# nodes are 8 H100 with one 400 Gb/s NIC each (section 3.3.1, "Compute" and "Network"), the h100 preset.
LLAMA3_24K = PodNetwork(
    name="llama3_24k", pod_gpus=3072, oversubscription=7.0, gpus=8 * 3072,
    source="Dubey et al. 2024, The Llama 3 Herd of Models, arXiv 2407.21783, section 3.3.1: 24K GPUs, "
           "pods of 3,072 GPUs with full bisection bandwidth, 1:7 oversubscribed above them")

NETWORKS: dict[str, PodNetwork] = {n.name: n for n in (LLAMA3_24K,)}


def _by_name(what: str, value, kind: type, table: dict, instead: str):
    """``value`` itself when it is a ``kind``, else the entry of ``table`` it names (any case)."""
    if isinstance(value, kind):
        return value
    if isinstance(value, str) and value.lower() in table:
        return table[value.lower()]
    raise ValueError(f"unknown {what} {value!r}; use one of {sorted(table)}{instead}")


def get_network(network: str | PodNetwork) -> PodNetwork:
    """Return a pod network given its name or the PodNetwork itself."""
    return _by_name("network", network, PodNetwork, NETWORKS,
                    ", a PodNetwork, or pod_gpus= and oversubscription= (None: flat above the node)")


def get_preset(preset: str | HardwarePreset) -> HardwarePreset:
    """Return a preset given its name or the preset itself (for example from calibrate())."""
    return _by_name("hardware preset", preset, HardwarePreset, PRESETS,
                    " or pass a HardwarePreset (for example course_lib.real.calibrate())")


def preset_from_measurements(flops: float, memory_bytes: float, intra_latency: float,
                             intra_bandwidth: float, inter_latency: float | None = None,
                             inter_bandwidth: float | None = None, name: str = "measured",
                             peak_flops: float | None = None) -> HardwarePreset:
    """Build a preset from measured numbers; without inter-node figures the intra-node link is reused."""
    intra = Link(latency=intra_latency, bandwidth=intra_bandwidth)
    inter = intra if inter_latency is None and inter_bandwidth is None else Link(
        latency=intra_latency if inter_latency is None else inter_latency,
        bandwidth=intra_bandwidth if inter_bandwidth is None else inter_bandwidth)
    return HardwarePreset(name=name, flops=flops, memory_bytes=memory_bytes, intra_node=intra,
                          inter_node=inter, source="measured", peak_flops=peak_flops)
