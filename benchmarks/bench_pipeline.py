"""Benchmark: the chapter-05 reference pipeline stage against torch.distributed.pipelining, same 1F1B step.

On 4 CPU ranks, a stack of 4 Linear+Tanh blocks (one per stage) runs one training step of 8 micro-batches,
alternately with the solution notebook's run_stage on its one_f_one_b op lists and with PipelineStage +
Schedule1F1B. Prints median step times and their ratio (goal: within 1.5x), then the measured bubble of
the reference pipeline against the simulated one. Usage: python benchmarks/bench_pipeline.py [--width 512]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.distributed.pipelining import PipelineStage, Schedule1F1B  # noqa: E402

from course_lib import sim  # noqa: E402
from course_lib.grading.attempt.student_function import StudentFunction  # noqa: E402
from course_lib.grading.checks.ch05_pipeline.ranks import warm_autograd  # noqa: E402
from course_lib.models import make_layer_stack, split_into_stages  # noqa: E402
from course_lib.notebook_cells import sources_by_id  # noqa: E402
from course_lib.real import run_ranks  # noqa: E402
from course_lib.real.chapter_runs.stage_timing import stage_timeline, time_stage  # noqa: E402

SOLUTION = ROOT / "solutions" / "05_pipeline_parallel" / "05_pipeline_parallel.ipynb"
CELLS = ("one_f_one_b", "run_stage")


def race(rank, world_size, sources, width, rows, microbatches, steps):
    """Per step, this rank's seconds for the reference stage and for torch's; the last step's op spans."""
    one_f_one_b = StudentFunction("one_f_one_b", sources=sources).resolve()
    run_stage = StudentFunction("run_stage", sources=sources).resolve()
    part = split_into_stages(make_layer_stack(seed=0, width=width), world_size)[rank]
    data = list(torch.randn(microbatches * rows, width, generator=torch.Generator().manual_seed(0))
                .chunk(microbatches))
    first, last = rank == 0, rank == world_size - 1
    ops = one_f_one_b(world_size, microbatches)[rank]
    stage = PipelineStage(part, rank, world_size, torch.device("cpu"))
    schedule = Schedule1F1B(stage, n_microbatches=microbatches, loss_fn=nn.functional.mse_loss)
    whole = torch.cat(data)

    def reference():
        run_stage(part, ops, (rows, width), inputs=data if first else None, targets=data if last else None,
                  loss_fn=nn.functional.mse_loss if last else None)

    def torch_pipelining():
        kwargs = {"target": whole} if last else {}
        schedule.step(*((whole,) if first else ()), **kwargs)

    times, spans = {"reference": [], "torch": []}, []
    for step in range(steps + 1):                      # the first round warms up, it is not kept
        for name, run in (("reference", reference), ("torch", torch_pipelining)):
            part.zero_grad(set_to_none=True)
            dist.barrier()
            start = time.perf_counter()
            with time_stage(part) as recorded:
                run()
            dist.barrier()
            if step:
                times[name].append(time.perf_counter() - start)
            if name == "reference":
                spans = recorded
    return times, spans


def bubble_report(spans, ops, microbatches) -> str:
    measured = stage_timeline(spans, ops)
    stages = len(spans)
    forward = [statistics.median(e - s for p, s, e in stage if p == "F") for stage in spans]
    backward = [statistics.median(e - s for p, s, e in stage if p == "B") for stage in spans]
    starts = [{e.label: e.start for e in lane} for lane in measured.lanes]
    ends = [{e.label: e.end for e in lane} for lane in measured.lanes]
    hop = statistics.median(max(0.0, starts[s + 1][f"F{m}"] - ends[s][f"F{m}"])
                            for s in range(stages - 1) for m in range(microbatches))
    simulated = sim.simulate_pipeline(sim.Schedule("1f1b", stages, microbatches, 1, ops), forward, backward,
                                      t_comm=hop)
    return (f"bubble: measured {measured.bubble_fraction:.1%}, simulated with the measured op and hop times "
            f"{simulated.bubble_fraction:.1%} (hop {hop * 1e3:.2f} ms, mean forward "
            f"{statistics.mean(forward) * 1e3:.2f} ms), formula without hops "
            f"{sim.bubble_fraction_formula(stages, microbatches):.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--rows", type=int, default=64, help="samples per micro-batch")
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=15)
    options = parser.parse_args()
    sources = sources_by_id(SOLUTION, CELLS)
    warm_autograd()
    per_rank = run_ranks(race, options.ranks, sources, options.width, options.rows, options.microbatches,
                         options.steps, timeout=600)
    slowest = {name: [max(t) for t in zip(*(r[0][name] for r in per_rank), strict=True)]
               for name in ("reference", "torch")}
    medians = {name: statistics.median(times) for name, times in slowest.items()}
    ratio = medians["reference"] / medians["torch"]
    print(f"{options.ranks} ranks, 1F1B, {options.microbatches} micro-batches of "
          f"{options.rows}x{options.width}, median of {options.steps} steps (slowest rank)")
    print(f"  reference run_stage: {medians['reference'] * 1e3:8.1f} ms per step")
    print(f"  torch Schedule1F1B:  {medians['torch'] * 1e3:8.1f} ms per step")
    verdict = "OK" if ratio <= 1.5 else "SLOWER"
    print(f"  ratio reference / torch = {ratio:.2f}x (goal: within 1.5x) {verdict}")
    ops = [[op[:2] for op in stage] for stage in sim.pipeline_schedule("1f1b", options.ranks,
                                                                       options.microbatches).ops]
    print("  " + bubble_report([r[1] for r in per_rank], ops, options.microbatches))


if __name__ == "__main__":
    main()
