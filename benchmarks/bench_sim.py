"""Speed of the virtual-clock simulator: the seed's 1D example against the real time it simulates, and
one full 4D training step of a 405B-class model from 64 to 4096 simulated GPUs (events per second).

Run: .venv/bin/python benchmarks/bench_sim.py   (prints medians of several runs and ratios)
"""

from __future__ import annotations

import os
import platform
import statistics
import time

from course_lib import sim

REPEATS = 5

# (GPUs, dp, tp, pp, cp): TP inside a node, PP across nodes, as Megatron-LM places them.
LAYOUTS = [(64, 1, 8, 8, 1), (256, 2, 8, 16, 1), (1024, 8, 8, 16, 1), (4096, 16, 8, 16, 2)]


def median_seconds(fn, repeats: int = REPEATS) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def bench_seed() -> None:
    wall, (simulated, _) = median_seconds(lambda: sim.seed_1d(4), repeats=21)
    print(f"seed 1D example (4 ranks): simulates {simulated:.2f} s in {wall * 1e6:.0f} us "
          f"-> {simulated / wall:,.0f}x faster than real time (goal >= 1000x)")
    wall, (simulated, _) = median_seconds(lambda: sim.seed_0d(), repeats=21)
    print(f"seed 0D example: simulates {simulated:.1f} s in {wall * 1e6:.0f} us -> {simulated / wall:,.0f}x")


def bench_4d() -> None:
    print(f"\n4D training step of {sim.LLAMA3_405B.name} on H100 nodes (zero_stage=1, 1F1B, "
          "16 micro-batches, full recompute), median of", REPEATS)
    print(f"{'GPUs':>6} {'layout':>22} {'events':>11} {'distinct':>9} {'wall s':>8} {'events/s':>13} "
          f"{'us/event':>9} {'step s':>7} {'MFU':>6} {'fits':>5}")
    per_event = []
    for gpus, dp, tp, pp, cp in LAYOUTS:
        cluster = sim.make_cluster(gpus // 8, 8)

        def step(cluster=cluster, dp=dp, tp=tp, pp=pp, cp=cp):
            return sim.simulate_training_step(sim.LLAMA3_405B, cluster, dp=dp, tp=tp, pp=pp, cp=cp,
                                              zero_stage=1, microbatches=16, global_batch=16 * dp,
                                              recompute="full", check_memory=False)

        wall, report = median_seconds(step)
        events = report.timeline.num_events
        distinct = sum(len(lane) for lane, _ in report.timeline._unique_lanes())
        per_event.append(wall / events)
        layout = f"dp{dp} tp{tp} pp{pp} cp{cp}"
        fits = "yes" if all(m.fits for m in report.memory_per_stage) else "no"
        print(f"{gpus:>6} {layout:>22} {events:>11,} {distinct:>9,} {wall:>8.3f} {events / wall:>13,.0f} "
              f"{wall / events * 1e6:>9.3f} {report.step_time:>7.2f} {100 * report.mfu:>5.1f}% {fits:>5}")
        if gpus == 1024:
            lanes = report.timeline.lanes
            copy_wall, _ = median_seconds(lambda lanes=lanes: [list(lane) for lane in lanes])
            copied = copy_wall + wall
    growth = per_event[-1] / per_event[0]
    print("Ranks of one pipeline stage are symmetric, so they share one event list (the 'distinct' column is "
          "what is computed);\ngiving every one of the 1024 ranks its own copied list as well takes "
          f"{copied:.3f} s in all (goal < 2 s).")
    print(f"cost per event at {LAYOUTS[-1][0]} GPUs / at {LAYOUTS[0][0]} GPUs = {growth:.2f} "
          "(<= 1 means no worse than linear in events)")


def bench_distinct_events() -> None:
    """Grow the events that are really computed (more micro-batches) at a fixed 1024 GPUs."""
    print("\nDistinct events computed as micro-batches grow (1024 GPUs, dp8 tp8 pp16):")
    print(f"{'micro-batches':>14} {'distinct':>10} {'wall s':>8} {'us/distinct event':>18}")
    cluster = sim.make_cluster(128, 8)
    costs = []
    for m in (16, 64, 256):
        def step(m=m):
            return sim.simulate_training_step(sim.LLAMA3_405B, cluster, dp=8, tp=8, pp=16, zero_stage=1,
                                              microbatches=m, global_batch=8 * m, recompute="full",
                                              check_memory=False)
        wall, report = median_seconds(step, repeats=3)
        distinct = sum(len(lane) for lane, _ in report.timeline._unique_lanes())
        costs.append(wall / distinct)
        print(f"{m:>14} {distinct:>10,} {wall:>8.3f} {wall / distinct * 1e6:>18.3f}")
    print(f"cost per distinct event at 256 / at 16 micro-batches = {costs[-1] / costs[0]:.2f} (~1: linear)")


if __name__ == "__main__":
    print("machine:", machine())
    bench_seed()
    bench_4d()
    bench_distinct_events()
