"""Checks of the capstone's layout: the student picks DP x TP x PP, micro-batches and the placement order
for a job, and is graded by its outcome in the simulator (it fits; its step is near the fastest).

The reference is the course's public layout search (sim.search_layouts, which the answer may not call: the
capstone's Refusal refuses course_lib.sim), run here, outside the student's process. Nothing here picks a
layout. A job is handed to the student as plain numbers, so the answer needs nothing of course_lib.
"""

from __future__ import annotations

import ast

from course_lib import sim
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.checks.ch08_capstone.visible import REFUSAL
from course_lib.grading.checks.ch08_mesh.visible import student_answers

# What the simulator is told besides the student's layout: ZeRO-1 and selective recompute, as in section 5.
FIXED = dict(zero_stage=1, recompute="selective")
SLOWER_AT_MOST = 1.25    # the student's step over the fastest layout the search finds
# (layers, hidden, heads, seq_len, vocab, nodes, gpus_per_node, global_batch): a 13B-class model on two
# nodes (it needs some model parallelism to fit) and a 70B-class model on four (it needs TP and PP).
VISIBLE_JOBS = ((40, 5120, 40, 4096, 32000, 2, 8, 32), (80, 8192, 64, 4096, 32000, 4, 8, 64))
KEYS = ("dp", "tp", "pp", "microbatches", "placement")


def _model_and_cluster(job: tuple):
    layers, hidden, heads, seq_len, vocab, nodes, gpus_per_node, _ = job
    return sim.TransformerSpec(layers, hidden, heads, seq_len, vocab), sim.make_cluster(nodes, gpus_per_node)


def job_for_student(job: tuple) -> dict:
    """The job as plain numbers: the model, the cluster (H100 preset: usable bytes, sustained FLOP/s, the
    two links' bandwidths in bytes/s), and the sequences per step."""
    model, cluster = _model_and_cluster(job)
    preset = cluster.preset
    return dict(layers=model.layers, hidden=model.hidden, heads=model.heads, seq_len=model.seq_len,
                vocab=model.vocab_size, num_params=int(model.num_params), nodes=cluster.nodes,
                gpus_per_node=cluster.gpus_per_node, memory=float(preset.usable_memory),
                flops=float(preset.flops), intra_bandwidth=float(preset.intra_node.bandwidth),
                inter_bandwidth=float(preset.inter_node.bandwidth), global_batch=job[-1])


def fastest_step(job: tuple) -> tuple[float, dict]:
    """(seconds, layout) of the fastest layout the course's search finds for ``job`` (ZeRO-1, selective)."""
    model, cluster = _model_and_cluster(job)
    rows = sim.search_layouts(model, cluster, job[-1], recompute=FIXED["recompute"],
                              micro_batch_sizes=(1, 2, 4), simulate_top=3)
    best = rows[0]
    return best["step_time"], {k: best[k] for k in ("dp", "tp", "pp", "microbatches")}


def _unplain(value):
    """A name the child sent back as its repr ("'tp'"), as the name again; anything else unchanged."""
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return value
    return [_unplain(v) for v in value] if isinstance(value, list) else value


def simulate_layout(job: tuple, layout) -> tuple[float | None, str | None]:
    """(step seconds, None) for the student's layout, or (None, why it cannot run or does not fit)."""
    if not isinstance(layout, dict) or set(layout) != set(KEYS):
        return None, f"the layout must be a dict with exactly the keys {KEYS}, got {layout!r}"[:300]
    model, cluster = _model_and_cluster(job)
    placement = _unplain(layout["placement"])
    if not isinstance(placement, (list, tuple)):
        return None, f"placement must be a tuple naming tp, cp, dp and pp, innermost first, got {placement!r}"
    try:
        report = sim.simulate_training_step(model, cluster, dp=layout["dp"], tp=layout["tp"], pp=layout["pp"],
                                            microbatches=layout["microbatches"], global_batch=job[-1],
                                            placement=tuple(placement), **FIXED)
    except (ValueError, TypeError) as error:
        return None, f"{type(error).__name__}: {error}"[:300]
    return report.step_time, None


def layout_outcomes(capstone_layout, jobs) -> list[dict]:
    """Per job: {"job", "layout", "seconds", "why", "best", "best_layout"}; the student's function runs in
    one child process under the capstone's Refusal."""
    outcomes = student_answers({"capstone_layout": capstone_layout},
                               [("capstone_layout", (job_for_student(job),)) for job in jobs],
                               "capstone_layout", REFUSAL)
    rows = []
    for job, outcome in zip(jobs, outcomes, strict=True):   # CallOutcome records (judge_runner)
        if outcome.raised is not None:
            seconds, why, layout = None, f"capstone_layout raised {outcome.raised}"[:300], None
        else:
            layout = outcome.value
            seconds, why = simulate_layout(job, layout)
        best, best_layout = fastest_step(job)
        rows.append(dict(job=job, layout=layout, seconds=seconds, why=why, best=best,
                         best_layout=best_layout))
    return rows


def _name(job: tuple) -> str:
    layers, hidden, _, seq_len, _, nodes, gpus_per_node, batch = job
    return f"{layers} layers x {hidden} on {nodes} x {gpus_per_node} GPUs, {batch} sequences of {seq_len}"


def check_layout_fits(capstone_layout, jobs=VISIBLE_JOBS) -> None:
    """On every job: a layout the simulator can run (degrees multiply to the GPUs, divide the layers and
    heads, a placement naming tp, cp, dp and pp) that fits in each GPU's memory."""
    rows = layout_outcomes(capstone_layout, jobs)
    fail_with([f"{_name(r['job'])}: {r['why']}" for r in rows if r["why"]],
              "capstone_layout's layout cannot run or does not fit")
    print(f"capstone_layout: fits on {len(rows)} jobs")


def check_layout_fast(capstone_layout, jobs=VISIBLE_JOBS) -> None:
    """On every job: the simulated step of the student's layout at most SLOWER_AT_MOST x the fastest."""
    rows = layout_outcomes(capstone_layout, jobs)
    problems = []
    for r in rows:
        if r["why"]:
            problems.append(f"{_name(r['job'])}: {r['why']}")
        elif r["seconds"] > SLOWER_AT_MOST * r["best"]:
            problems.append(f"{_name(r['job'])}: your layout {r['layout']} takes {r['seconds']:.3f} s a "
                            f"step, {r['seconds'] / r['best']:.2f}x the fastest found ({r['best']:.3f} s); "
                            f"at most {SLOWER_AT_MOST}x passes")
    fail_with(problems, "capstone_layout's layout is slower than it needs to be")
    for r in rows:
        print(f"{_name(r['job'])}: {r['seconds']:.3f} s a step, {r['seconds'] / r['best']:.2f}x the fastest")
