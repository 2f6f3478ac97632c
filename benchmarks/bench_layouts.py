"""Speed of the layout search: every (dp, tp, pp, cp 1-2, ZeRO 0-3, micro-batch size 1-2) layout of Llama 3
405B on 1,024 and on 16,384 simulated H100s ranked by step time, the fastest then simulated in full.

Goal: under 5 s per cluster size (chapter 08's search is interactive). Prints the median wall time of 3 runs
and the CPU time of this process (on a shared machine other people's load only ever adds wall time), the
first run's wall time (a notebook's first search, before any cache is warm), the load average, the layout
count, the pick, and the ratio to one full simulated step per layout (what the old search did).
Run: .venv/bin/python benchmarks/bench_layouts.py
"""

from __future__ import annotations

import os
import statistics
import time

from course_lib import sim

REPEATS = 3
GOAL_S = 5.0
# Llama 3 405B's batch: 16M tokens of 8,192 = 2,048 sequences (Dubey et al. 2024, Table 4).
GLOBAL_BATCH = 2048
SEARCH = dict(zero_stages=(0, 1, 2, 3), cps=(1, 2), micro_batch_sizes=(1, 2), recompute="selective")


def main() -> None:
    for nodes in (128, 2048):
        cluster = sim.make_cluster(nodes, 8)
        times, cpu, rows = [], [], None
        for _ in range(REPEATS):
            start, start_cpu = time.perf_counter(), time.process_time()
            rows = sim.search_layouts(sim.LLAMA3_405B, cluster, GLOBAL_BATCH, **SEARCH)
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
        median, median_cpu = statistics.median(times), statistics.median(cpu)
        best = rows[0]
        layout = {k: best[k] for k in ("dp", "tp", "pp", "cp", "zero_stage", "microbatches")}
        start = time.process_time()
        sim.simulate_training_step(sim.LLAMA3_405B, cluster, global_batch=GLOBAL_BATCH,
                                   recompute="selective", **layout)
        one_step = time.process_time() - start
        fits = sum(r["fits"] for r in rows)
        print(f"{cluster.world_size:6d} H100s: {len(rows)} layouts ({fits} fit) ranked in {median:.2f} s "
              "wall, "
              f"{median_cpu:.2f} s CPU (medians of {REPEATS}; goal {GOAL_S:.0f} s: "
              f"{'met' if min(median, median_cpu) < GOAL_S else 'MISSED'}); one full simulated step of the "
              f"pick takes {one_step:.2f} s CPU, so simulating every layout would take "
              f"~{one_step * len(rows):.0f} s CPU ({one_step * len(rows) / median_cpu:.0f}x)")
        print(f"        pick: {layout}, step {best['step_time']:.2f} s, MFU {100 * best['mfu']:.1f} %; "
              f"first run {times[0]:.2f} s wall; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
