"""BF16 GEMM throughput at Llama 3 405B's shapes on one GPU: what the simulator's GEMM efficiency is held to.

Llama 3 405B (arXiv 2407.21783, Table 3): hidden 16,384, FFN 53,248 (SwiGLU, so two up-projections), 128
query heads and 8 key/value heads of 128, vocabulary 128,256; trained with tensor parallel 8 and one 8K
sequence a micro-batch (section 3.3.2). So each GPU's matrix products have M = 8,192 tokens and the
weight's shard for N or K. The backward's two products per layer (dX = dY W^T, dW = X^T dY) have the same
FLOPs with the dimensions moved; both are timed.

Needs a CUDA GPU: prints why and exits 0 without one (CI never has one). Run with `python
benchmarks/bench_gemm_gpu.py`; its figures and the machine they came from are in benchmarks/README.md, and
`course_lib.sim.cluster.presets.MEASURED_GEMM` cites them.
"""

from __future__ import annotations

import datetime
import statistics
import sys

TOKENS = 8192            # one 8K sequence per micro-batch (Llama 3, section 3.3.2)
HIDDEN, FFN, VOCAB = 16384, 53248, 128256
HEAD_DIM, Q_HEADS, KV_HEADS, TP = 128, 128, 8, 8

# name -> (M, K, N) of the forward product Y[M, N] = X[M, K] @ W[K, N] on one of TP = 8 ranks.
SHAPES = {
    "qkv (column parallel)": (TOKENS, HIDDEN, (Q_HEADS + 2 * KV_HEADS) * HEAD_DIM // TP),
    "attention out (row parallel)": (TOKENS, Q_HEADS * HEAD_DIM // TP, HIDDEN),
    "ffn gate+up (column parallel)": (TOKENS, HIDDEN, 2 * FFN // TP),
    "ffn down (row parallel)": (TOKENS, FFN // TP, HIDDEN),
    "output head (vocabulary parallel)": (TOKENS, HIDDEN, VOCAB // TP),
    "square 8192": (8192, 8192, 8192),
}
REPEATS, WARMUP = 30, 5


def _time_product(torch, a, b) -> float:
    """Median seconds of one ``a @ b`` over REPEATS CUDA-event-timed runs, after WARMUP."""
    for _ in range(WARMUP):
        a @ b
    times = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def _rates(torch, m: int, k: int, n: int) -> dict[str, float]:
    """TFLOP/s of the forward product and of the backward's dX and dW products at one shape."""
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    flops = 2.0 * m * k * n
    return {"forward": flops / _time_product(torch, x, w) / 1e12,
            "dX = dY W^T": flops / _time_product(torch, dy, w.t()) / 1e12,
            "dW = X^T dY": flops / _time_product(torch, x.t(), dy) / 1e12}


def main() -> int:
    try:
        import torch
    except ImportError:
        print("bench_gemm_gpu: torch is not installed; skipped")
        return 0
    if not torch.cuda.is_available():
        print("bench_gemm_gpu: needs a CUDA GPU (none here); skipped")
        return 0
    props = torch.cuda.get_device_properties(0)
    print(f"device {props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}, "
          f"{datetime.date.today().isoformat()}; median of {REPEATS} after {WARMUP} warm-up runs, bf16")
    all_rates = []
    for name, (m, k, n) in SHAPES.items():
        rates = _rates(torch, m, k, n)
        if name != "square 8192":
            all_rates += rates.values()
        cells = ", ".join(f"{part} {rate:.0f}" for part, rate in rates.items())
        print(f"gemm {name:34s} M={m} K={k} N={n}: TFLOP/s {cells}")
    print(f"gemm Llama 3 405B shapes: median {statistics.median(all_rates):.0f} TFLOP/s, "
          f"min {min(all_rates):.0f}, max {max(all_rates):.0f} (15 products, square excluded)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
