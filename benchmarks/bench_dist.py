"""Benchmark of course_lib.real: run_ranks overhead versus torch.multiprocessing.spawn, and how well the
calibrated simulator predicts a real gloo all_reduce. Prints medians and ratios from one run.

    .venv/bin/python benchmarks/bench_dist.py [--quick]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from course_lib.real import calibrate, predict_all_reduce, run_ranks
from course_lib.real.measure.calibration import LINK_SIZES, _measure
from course_lib.real.measure.timing_harness import _all_reduce_block, per_call_medians

RANKS = 4
ALL_REDUCE_SIZES = (1 << 20, 4 << 20, 16 << 20, 64 << 20)
TOLERANCE = 0.25


def empty(rank, world_size):
    return None


def _spawned_rank(rank, world_size, store_path):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=60))
    empty(rank, world_size)
    dist.destroy_process_group()


def _spawn_empty_ranks() -> None:
    """The baseline: torch's own spawn of the same work. A fresh file store per run, so no port is
    picked in advance for another process on this busy machine to take."""
    with tempfile.TemporaryDirectory(prefix="bench-spawn-") as scratch:
        mp.spawn(_spawned_rank, args=(RANKS, os.path.join(scratch, "store")), nprocs=RANKS)


def median_seconds(action, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_overhead(runs: int, spawn_runs: int) -> None:
    run_ranks(empty, RANKS)  # warm-up: first-use imports
    ours = median_seconds(lambda: run_ranks(empty, RANKS), runs)
    spawned = median_seconds(_spawn_empty_ranks, spawn_runs)
    print(f"run_ranks overhead, {RANKS} ranks, empty function (gloo group initialised):")
    print(f"  run_ranks median {ours * 1e3:.0f} ms over {runs} runs (goal < 500 ms: "
          f"{'met' if ours < 0.5 else 'MISSED'})")
    print(f"  torch.multiprocessing.spawn median {spawned * 1e3:.0f} ms over {spawn_runs} runs")
    print(f"  ratio spawn / run_ranks = {spawned / ours:.1f}x (goal >= 10x: "
          f"{'met' if spawned / ours >= 10 else 'MISSED'})")


def _calibrate_and_measure(rank, world_size, rounds):
    """Calibration measurements and real all_reduces, alternating round by round in one run, so a
    burst of other load on this shared machine hits the prediction and the measurement alike."""
    blocks = [_all_reduce_block(nbytes) for nbytes in ALL_REDUCE_SIZES]
    calibration_rounds, all_reduce_rounds = [], []
    for _ in range(rounds):
        calibration_rounds.append(_measure(rank, world_size, LINK_SIZES, 1))
        all_reduce_rounds.append(per_call_medians(blocks, 1))
    return calibration_rounds, all_reduce_rounds


def _medians(rounds: list[dict]) -> dict:
    """Element-wise medians over rounds of the calibration measurements; the recorded blocks (message
    blocks, compute alone and per lane together) are pooled over the rounds instead."""
    merged = {}
    for key, first in rounds[0].items():
        values = [r[key] for r in rounds]
        if key in ("message_blocks", "compute_alone"):
            merged[key] = [seconds for r in values for seconds in r]
            continue
        if key == "compute_together":
            merged[key] = [[seconds for r in values for seconds in r[lane]] for lane in range(len(first))]
            continue
        merged[key] = ([statistics.median(column) for column in zip(*values, strict=True)]
                       if isinstance(first, list) else statistics.median(values))
    return merged


def bench_prediction(rounds: int) -> None:
    print(f"\ngloo all_reduce: calibrated simulator (a ring in 1 MiB segments, as gloo's) vs measured "
          f"median of {rounds} blocks of back-to-back calls, goal within {TOLERANCE:.0%}")
    print(f"  {'ranks':>5} {'MB':>4} {'predicted ms':>13} {'measured ms':>12} {'ratio':>6}  within")
    inside = total = 0
    for world_size in (2, 4):
        calibration_rounds, all_reduce_rounds = run_ranks(_calibrate_and_measure, world_size, rounds,
                                                          timeout=600)[0]
        preset = calibrate(world_size, measurements={"sizes": LINK_SIZES, **_medians(calibration_rounds)})
        measured = [statistics.median(column) for column in zip(*all_reduce_rounds, strict=True)]
        for nbytes, seconds in zip(ALL_REDUCE_SIZES, measured, strict=True):
            predicted = predict_all_reduce(preset, nbytes, world_size)
            ratio = predicted / seconds
            ok = abs(ratio - 1) <= TOLERANCE
            inside, total = inside + ok, total + 1
            print(f"  {world_size:>5} {nbytes >> 20:>4} {predicted * 1e3:>13.2f} {seconds * 1e3:>12.2f} "
                  f"{ratio:>6.2f}  {'yes' if ok else 'NO'}")
        print(f"    preset: {preset.source}")
    print(f"  {inside}/{total} predictions within {TOLERANCE:.0%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    quick = parser.parse_args().quick
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPU(s), {platform.processor() or 'cpu'}, "
          f"torch {torch.__version__}, load average {os.getloadavg()[0]:.1f} at start")
    bench_overhead(runs=5 if quick else 15, spawn_runs=2 if quick else 5)
    bench_prediction(rounds=3 if quick else 9)


if __name__ == "__main__":
    main()
