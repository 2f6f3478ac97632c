"""Every predict-then-measure comparison of the course, run once through course_lib (the functions the
chapters' cells call, with the cells' arguments), each printing its line, then how many land within
[0.67, 1.5] (issue 39). A goal for a quiet machine, not a timed test: run it with nothing else busy.

    .venv/bin/python benchmarks/bench_predictions.py

Prints the machine, the load average before and after, and, for each comparison, the line
``prediction <chapter> <what>: measured <x> ms, predicted <y> ms, ratio <r>`` (and, outside the band,
where the measured time went, lane by lane).
"""

from __future__ import annotations

import os
import platform

import torch

from course_lib.dist import (
    calibrate,
    compare_all_reduce,
    compare_ddp_step,
    compare_fed_back,
    fed_back_cluster,
    measure_all_reduce,
)
from course_lib.sim import WITHIN


def orientation_all_reduce():
    """Chapter 00, cells 23-25: the all-reduce calibrate() fitted, re-measured at 64 B .. 16 MiB."""
    machine = calibrate(world_size=2)
    return compare_all_reduce("00", machine, 2, [4 ** k for k in range(3, 13)])[0]


def orientation_ddp_step():
    """Chapter 00, cells 28-30: one DDP step of the wide MLP on 2 ranks."""
    machine = calibrate(world_size=2)
    return compare_ddp_step("00", machine, 2, (1024, 2048, 2048, 1024), 64)


def collectives_gloo_ring(world_size):
    """Chapter 02, cells 51-53: gloo's all-reduce at 4 KiB .. 4 MiB by the segment model (one segment
    in flight, the student's formula, which is ``predict_all_reduce`` with ``segments_in_flight=1``)."""
    def comparison():
        machine = calibrate(world_size=world_size, segments_in_flight=1)
        return compare_all_reduce("02", machine, world_size, [4 ** k for k in range(6, 12)])[0]
    return comparison


def cluster_bus_bandwidth():
    """Chapter 09, cells 25-29: gloo's all-reduce at 1 .. 8 MiB on 2 ranks, fitted (Theil-Sen) and fed
    back as a simulated cluster, predicting 16 and 32 MiB, with 8 MiB again as the control."""
    fit_sizes = [1 << 20, 1 << 21, 1 << 22, 1 << 23]
    fit_times = measure_all_reduce(2, fit_sizes, repetitions=7)
    cluster = fed_back_cluster(fit_sizes, fit_times, 2)
    return compare_fed_back("09", cluster, 2, [1 << 24, 1 << 25], control=(fit_sizes[-1], fit_times[-1]))


COMPARISONS = [orientation_all_reduce, orientation_ddp_step,
               collectives_gloo_ring(2), collectives_gloo_ring(3), cluster_bus_bandwidth]


def main() -> None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"machine: {platform.machine()}, {cores} of {os.cpu_count()} CPU(s) usable, "
          f"torch {torch.__version__}, load average {os.getloadavg()[0]:.1f} at start")
    inside = 0
    for comparison in COMPARISONS:
        result = comparison().report()
        inside += result.within
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    print(f"predictions: {inside} of {len(COMPARISONS)} within [{WITHIN[0]}, {WITHIN[1]}]")


if __name__ == "__main__":
    main()
