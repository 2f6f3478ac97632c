"""What chapter 02's prose says about sends, NCCL and a bucket's latency, asserted: gloo's blocking send
measured on real ranks, NCCL's non-blocking one read in the installed torch, the shares the cells print,
Rabenseifner beside the ring, the in-flight rule beside gloo's loop, and the race's recorded messages."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from course_lib import sim
from course_lib.real import run_ranks

C10D = Path(dist.__file__).parent / "distributed_c10d.py"
RECEIVER_LATE_S = 0.3


def _send_waits_for_the_receiver(rank, world_size, nbytes):
    tensor = torch.zeros(max(1, nbytes // 4))
    if rank == 0:
        start = time.perf_counter()
        dist.send(tensor, dst=1)
        return time.perf_counter() - start
    time.sleep(RECEIVER_LATE_S)
    dist.recv(tensor, src=0)
    return None


@pytest.mark.slow
@pytest.mark.parametrize("nbytes", [4, 1 << 20])
def test_on_gloo_a_send_returns_only_once_the_receiver_has_posted_its_receive(nbytes):
    waited = run_ranks(_send_waits_for_the_receiver, 2, nbytes, timeout=30)[0]
    assert waited >= 0.9 * RECEIVER_LATE_S


def test_dist_send_is_isend_then_wait_and_nccls_wait_blocks_the_stream_not_python():
    lines = C10D.read_text().splitlines()[2750:2753]           # the prose cites lines 2751-2753
    assert "work = isend(" in lines[0] and lines[-1].strip() == "work.wait()", lines
    assert "Letting the current stream block on the completion of the NCCL work" in dist.Work.wait.__doc__


@pytest.mark.parametrize("nodes", [1, 16, 128, 512])
def test_the_bucket_latency_shares_section_7_prints_lie_between_0_and_1(nodes):
    cluster = sim.make_cluster(nodes, 8)
    link = cluster.group_link(range(cluster.world_size))
    share = sim.latency_share("all_reduce", 25 * 2**20, cluster.world_size, link)
    bandwidth_term = 2 * (cluster.world_size - 1) / cluster.world_size * 25 * 2**20 / link.bandwidth
    ring = sim.collective_time("all_reduce", 25 * 2**20, cluster.world_size, link, "ring")
    assert 0 < share < 1 and share == pytest.approx(1 - bandwidth_term / ring)


def test_section_1s_table_all_to_all_and_broadcast_as_nccl_runs_them():
    # cell 16: all-to-all no faster than half of each GPU's buffer through its NIC; broadcast about S/B
    two = sim.make_cluster(2, 8)
    ranks, size = range(16), 64e6
    floor = size * 8 / 16 / two.preset.inter_node.bandwidth
    assert floor <= two.collective_time("all_to_all", size, ranks) < 1.05 * floor
    link = two.group_link(ranks)
    assert size / link.bandwidth < two.collective_time("broadcast", size, ranks) < 1.5 * size / link.bandwidth


# Issue 41: the ring exercise states the property, not the order; the problems' answers only on request.
NOTEBOOK = Path(__file__).resolve().parents[2] / "solutions" / "02_collectives" / "02_collectives.ipynb"
NCCL_PARAGRAPH = "more-primitives-costs-intro"


def _cells() -> dict:
    import json

    return {cell["id"]: "".join(cell["source"]) for cell in json.loads(NOTEBOOK.read_text())["cells"]}


def test_the_ring_exercise_states_the_property_and_leaves_the_order_to_the_student():
    cells = _cells()
    intro, docstring = cells["exercise-intro"], cells["ring_all_reduce"].split("### BEGIN SOLUTION")[0]
    assert "no rank may block in a send that its neighbour is not receiving" in intro
    assert "receiving = dist.irecv" not in intro and "Post both" not in intro
    assert "flat contiguous buffer" not in intro and "flat contiguous buffer" not in docstring
    assert "copy back" not in intro and "written back" not in docstring


def test_the_problems_answers_are_computed_and_printed_only_on_request():
    cells = _cells()
    assert "## 8. Problems" in cells["ch02-problems"]
    answers = cells["ch02-problems-answers"]
    assert answers.startswith("%%worked_answer\n")   # a button on Run All (course_lib.viz.worked_answer)
    # the numbers the answers print: 1.75 GB in 14 messages, the 32 MB crossover, 200 and 350 GB/s
    n, size, alpha, bandwidth = 8, 1e9, 5e-6, 100e9
    assert 2 * (n - 1) / n * size == 1.75e9 and 2 * (n - 1) == 14
    link = sim.Link(latency=alpha, bandwidth=bandwidth)
    crossover = 64 * alpha * bandwidth
    assert crossover == pytest.approx(32e6)
    assert sim.collective_time("all_reduce", crossover, 64, link, algorithm="ring") == pytest.approx(
        4 * 63 * alpha)
    assert sim.bus_bandwidth("all_reduce", size, 5e-3, n) == pytest.approx(350e9)


def test_section_7_says_what_nccls_tuning_model_changes_and_that_the_bucket_cap_is_private():
    text = "\n".join(_cells().values())
    tuning = "https://github.com/NVIDIA/nccl/blob/master/src/graph/tuning.cc"
    assert "hardly more than the ring's" not in text
    assert f"tuning model ([`src/graph/tuning.cc`]({tuning})) rates Tree's bandwidth below" in text
    assert "LL or LL128 protocol" in text and "upper bound for the ring" in text
    assert "_DEFAULT_BUCKET_CAP_MB  # torch's default (MiB), private" in text


# Issue 41, review finding 6 (cells 52-53): the prediction's ratios were 2-3x at 4 of 6 sizes while the prose
# read as if they agreed. Issue 55: the prose then named "small messages" as the miss, from a run of
# 2026-11-28, where later runs missed at 256 KiB and 1 MiB. The run now says where it misses (the band's
# sizes, each with its ratio and direction), and the prose explains the causes without reading a run.
def test_the_prediction_cells_say_where_the_model_misses_from_the_run_itself():
    cells = _cells()
    measuring, reading = cells["predict-measure"], " ".join(cells["predict-measure-read"].split())
    assert "segments_in_flight=2" in measuring
    assert '"  measured / predicted:"' in measuring and "misses_sentence(" in measuring
    assert "measure_all_reduce(world_size, [4, PREDICTED_SIZES[0]])" in measuring
    assert "**Where the model misses.** The line under each run's ratios says it, for that run" in reading
    assert "small messages" not in reading.lower() or "where the small sizes miss" in reading.lower()
    assert "2026" not in reading and "half or more" not in reading and "the model holds" not in reading


def _one_float_and_4_kib(rank, world_size):
    from course_lib.real.measure.timing_harness import _all_reduce_block, interleaved_times

    blocks = [_all_reduce_block(nbytes) for nbytes in (4, 4096)]
    fastest = interleaved_times([block for block, _ in blocks], 15, summary=min)
    return [seconds / calls for seconds, (_, calls) in zip(fastest, blocks, strict=True)]


@pytest.mark.slow
def test_a_small_all_reduce_costs_mostly_the_floor_every_call_pays():
    """Cell 55: an all-reduce of one float (gloo sends at most one segment of it per phase) costs about
    as much as a 4 KiB one, timed in one harness so that both see the same load: a cost that followed the
    bytes would make it 1/1024 of the 4 KiB call; the floor makes it a large share of it. Each size's
    fastest block (other work only adds time) measured 1.3 to 4 times as much on a quiet machine, 0.43 to
    0.49 times beside a full test run (load average 4), and 0.23 times once in a clean CI run (0.27 ms
    against 1.18 ms): so the bound is 1/32, 32 times what the bytes would give, which a cost that followed
    the bytes cannot reach and a floor does on any of these runs."""
    one_float, small = run_ranks(_one_float_and_4_kib, 2, timeout=60)[0]
    assert one_float >= small / 32, (one_float, small)


def test_the_nccl_paragraph_says_what_the_simulator_picks_from_and_when_nccl_gained_its_all_to_all():
    """The simulator chooses between NCCL's Ring and Tree only (vocabulary.NCCL_CHOICES), and prices the
    all-to-all as grouped sends: the prose says NVLink SHARP is not modelled and that NCCL 2.28.3 added
    ncclAlltoAll, each with its source (the 12-07 review)."""
    from course_lib.sim.vocabulary import NCCL_CHOICES

    assert set(NCCL_CHOICES["all_reduce"]) == {"ring", "double_binary_tree"}
    assert tuple(NCCL_CHOICES["all_to_all"]) == ("pairwise",)
    text = _cells()[NCCL_PARAGRAPH]
    assert "Ring/Tree cost model" in text and "does not model" in text
    assert "https://github.com/NVIDIA/nccl-tests/issues/212" in text
    assert "2.28.3 added `ncclAlltoAll`" in text and "https://github.com/NVIDIA/nccl/issues/1868" in text
    assert "NCCL has no all-to-all" not in text


# Issue 55, the 12-07 review's chapter 02 findings 4-6.
def test_rabenseifner_is_priced_beside_the_ring_and_recursive_doubling_and_its_users_are_named():
    """Cells 23-24: Rabenseifner's algorithm with its source and cost; the cell's own asserts hold (it saves
    the ring's extra latencies at every size, and recursive doubling wins only below the printed flip)."""
    cells = _cells()
    intro = cells["rabenseifner-intro"]
    assert "https://doi.org/10.1177/1094342005051521" in intro and "IJHPCA" in intro
    assert r"2\log_2 N\,\alpha + 2\,\frac{N-1}{N}\,\frac{S}{B}" in intro
    assert "MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE" in intro and "NCCL does not" in intro
    assert "https://github.com/NVIDIA/nccl/issues/790" in intro
    printed = []
    namespace = {"math": __import__("math"), "Link": sim.Link, "collective_time": sim.collective_time,
                 "rabenseifner_all_reduce": sim.rabenseifner_all_reduce, "print": printed.append}
    exec(cells["cost-formulas"], namespace)                       # link, N, alpha, B as the lesson sets them
    exec(cells["costs-plot"].split("\nsizes = ")[0], namespace)   # flip_bytes
    exec(cells["rabenseifner"], namespace)
    fastest = [line.split("fastest: ")[1].split(";")[0] for line in printed if "fastest: " in line]
    assert fastest == ["recursive_doubling", "rabenseifner", "rabenseifner", "rabenseifner"], printed
    assert "Rabenseifner's halving-then-doubling" in next(iter(cells.values()))


def test_the_in_flight_rule_is_labelled_a_fitted_heuristic_beside_gloos_own_loop():
    text = " ".join(_cells()["predict-intro"].split())
    gloo = "https://github.com/pytorch/gloo/blob/cc441984208d0b54b4fc614301f41e82e951e5cd/gloo/allreduce.cc"
    assert "**fitted heuristic**" in text and "not as gloo's schedule" in text
    assert ("we issue send/recv operations on iterations 0 and 1 and wait for them to complete on iterations "
            "2 and 3") in text and f"{gloo}#L274-L279" in text
    assert "first two segments travel together" in text


def _count_messages(rank, world_size, function_source):
    namespace = {"torch": torch, "dist": dist}
    exec(function_source, namespace)
    from course_lib.real import record_traffic

    with record_traffic() as log:
        namespace["all_reduce_through_rank_0"](torch.ones(1024))
    return [event.op for event in log.events]


def test_the_race_counts_the_messages_and_reads_which_was_faster_from_the_run():
    """Cell 45 said "the fewer, larger messages through rank 0 cost less overhead" from no measurement; the
    race now records the messages (6 through rank 0 on 4 ranks, all at rank 0) and its sentence names the
    faster one from the times it was given, either way."""
    cells = _cells()
    assert "cost less overhead" not in cells["race-notes"]
    naive = cells["naive"].split("\n\n\ndef naive_matches_torch")[0]
    ops = run_ranks(_count_messages, 4, naive, timeout=30)
    assert sum(op in ("send", "isend") for rank_ops in ops for op in rank_ops) == 6 and len(ops[0]) == 6
    sentence = "ring, naive" + cells["race-messages"].split("\nring, naive", 1)[1]
    for naive_seconds, faster in ((1e-3, "through rank 0"), (9e-3, "your ring")):
        printed = []
        exec(sentence, {"messages": {"your ring": 24, "through rank 0": 6}, "print": printed.append,
                        "seconds": {"your ring": [5e-3], "through rank 0": [naive_seconds]}})
        assert printed[0].startswith(f"In this run {faster} was faster") and "4 times as often" in printed[0]
