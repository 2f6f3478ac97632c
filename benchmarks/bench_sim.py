"""Speed of the virtual-clock simulator: the seed's 1D example against the real time it simulates, and
one full 4D training step of a 405B-class model from 64 to 4096 simulated GPUs (distinct events per second).

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
MODEL = sim.LLAMA3_405B
# Mixed-precision Adam keeps 2 + 2 + 12 bytes per parameter (ZeRO paper, Figure 1) somewhere in the cluster.
STATE_BYTES = 16


def median_seconds(fn, repeats: int = REPEATS) -> tuple[float, object]:
    median, _, result = timed(fn, repeats)
    return median, result


def timed(fn, repeats: int = REPEATS) -> tuple[float, float, object]:
    """(median, best, last result) of ``repeats`` runs. Ratios use the best run: on a shared machine
    other people's load only ever adds time, so the fastest run is the least disturbed one."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), result


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


def distinct_events(timeline) -> int:
    """Events the simulator really computes: ranks of one pipeline stage share one event list."""
    return sum(len(lane) for lane, _ in timeline._unique_lanes())


def step_at(cluster, dp, tp, pp, cp, microbatches=16):
    return sim.simulate_training_step(MODEL, cluster, dp=dp, tp=tp, pp=pp, cp=cp, zero_stage=1,
                                      microbatches=microbatches, global_batch=microbatches * dp,
                                      recompute="full", check_memory=False)


def bench_4d() -> None:
    print(f"\n4D training step of {MODEL.name} on H100 nodes (zero_stage=1, 1F1B, 16 micro-batches, "
          f"full recompute), median of {REPEATS}")
    print("distinct = events computed (one event list per pipeline stage, shared by its ranks); "
          "all = every rank's copy")
    print(f"{'GPUs':>6} {'layout':>17} {'distinct':>9} {'wall s':>7} {'distinct ev/s':>14} "
          f"{'us/distinct':>12} {'all events':>11} {'all-copies s':>13} {'step s':>7} {'MFU':>6} {'fits':>5}")
    per_distinct, notes = [], []
    for gpus, dp, tp, pp, cp in LAYOUTS:
        cluster = sim.make_cluster(gpus // 8, 8)
        wall, best, report = timed(lambda c=cluster, d=(dp, tp, pp, cp): step_at(c, *d))
        distinct, events = distinct_events(report.timeline), report.timeline.num_events
        # Secondary figure: the same step, then a private list of events for every rank (what a
        # timeline with no sharing would hold), for the "every event on the timeline" goal.
        lanes = report.timeline.lanes
        copy_wall, _ = median_seconds(lambda lanes=lanes: [list(lane) for lane in lanes])
        per_distinct.append(best / distinct)
        fits = all(m.fits for m in report.memory_per_stage)
        if not fits:
            need = MODEL.num_params * STATE_BYTES / gpus
            cap = cluster.preset.memory_bytes
            why = (f"no layout fits: {STATE_BYTES} bytes x {MODEL.num_params / 1e9:.0f}B parameters spread "
                   f"over all {gpus} GPUs is already {need / 1e9:.0f} GB per GPU > {cap / 1e9:.0f} GB"
                   if need > cap else "this layout does not fit")
            notes.append(f"{gpus} GPUs: fits=no ({why}); simulated with check_memory=False to time the "
                         "simulator only")
        layout = f"dp{dp} tp{tp} pp{pp} cp{cp}"
        print(f"{gpus:>6} {layout:>17} {distinct:>9,} {wall:>7.3f} {distinct / wall:>14,.0f} "
              f"{wall / distinct * 1e6:>12.2f} {events:>11,} {wall + copy_wall:>13.3f} "
              f"{report.step_time:>7.2f} {100 * report.mfu:>5.1f}% {'yes' if fits else 'no':>5}")
    for note in notes:
        print("  " + note)
    print(f"cost per distinct event at {LAYOUTS[-1][0]} GPUs / at {LAYOUTS[0][0]} GPUs = "
          f"{per_distinct[-1] / per_distinct[0]:.2f} (best runs; what grows besides the events is the "
          "per-rank bookkeeping: one lane and one name per rank)")
    print("goal: under 2 s with every event on the timeline at >= 1024 GPUs -> the 'all-copies s' column, "
          "which also gives every rank its own copy of its events")


def bench_distinct_events() -> None:
    """Grow the events that are really computed (more micro-batches) at a fixed 1024 GPUs."""
    print("\nCost against distinct events: micro-batches grow at a fixed 1024 GPUs (dp8 tp8 pp16), "
          "median of 7, 5 and 3 runs")
    print(f"{'micro-batches':>14} {'distinct':>10} {'wall s':>8} {'distinct ev/s':>14} {'us/distinct':>12} "
          f"{'best s':>7} {'best us/distinct':>17}")
    cluster = sim.make_cluster(128, 8)
    costs, counts = [], []
    repeats = {16: 7, 64: 5, 256: 3}
    for m in (16, 64, 256):
        wall, best, report = timed(lambda m=m: step_at(cluster, 8, 8, 16, 1, microbatches=m), repeats[m])
        distinct = distinct_events(report.timeline)
        costs.append(best / distinct)
        counts.append(distinct)
        print(f"{m:>14} {distinct:>10,} {wall:>8.3f} {distinct / wall:>14,.0f} "
              f"{wall / distinct * 1e6:>12.2f} {best:>7.3f} {best / distinct * 1e6:>17.2f}")
    print(f"distinct events x{counts[-1] / counts[0]:.1f} -> cost per distinct event at 256 / at 16 "
          f"micro-batches = {costs[-1] / costs[0]:.2f}, best runs (<= 1: cost grows no worse than linearly "
          "in events)")


if __name__ == "__main__":
    print("machine:", machine())
    bench_seed()
    bench_4d()
    bench_distinct_events()
