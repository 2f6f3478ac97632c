"""ZeRO-1/2's parameter all-gather after the update: exposed at the step's end by default, beside the next
step's forwards with overlap_param_gather=True (Megatron-Core's distributed optimizer option)."""

import pytest

from course_lib import sim
from course_lib.sim.job.config import make_config
from course_lib.sim.search.estimate import estimate_step_time

DGX = sim.make_cluster(nodes=4, gpus_per_node=8)
ONE = dict(dp=32, microbatches=1, recompute="full", check_memory=False)


def _step(stage, **kw):
    return sim.simulate_training_step(sim.LLAMA3_8B, DGX, zero_stage=stage, **ONE, **kw)


def test_the_gather_ends_the_step_unless_it_overlaps_the_next_forward():
    exposed, overlapped = _step(1), _step(1, overlap_param_gather=True)
    last = max(exposed.timeline.events(0), key=lambda e: e.end)
    assert last.label.startswith("ZeRO all-gather updated parameters")
    gathers = [e for e in overlapped.timeline.events(0) if "overlap_param_gather" in e.label]
    assert len(gathers) == 1 and gathers[0].start == 0.0
    assert overlapped.step_time < exposed.step_time


def test_ch07_with_one_micro_batch_stage_3_beats_stage_1_only_while_its_gather_is_exposed():
    # ch07 cells 60-61: the ordering flips back with Megatron-Core's overlap_param_gather
    assert _step(3).step_time < _step(1).step_time == _step(2).step_time
    assert _step(1, overlap_param_gather=True).step_time < _step(3).step_time


def test_the_search_estimate_leaves_the_overlapped_gather_out_of_the_tail():
    layout = dict(zero_stage=1, **{k: v for k, v in ONE.items() if k != "check_memory"})
    plain, overlapped = (estimate_step_time(make_config(sim.LLAMA3_8B, 32, overlap_param_gather=o, **layout),
                                            DGX) for o in (False, True))
    assert overlapped < plain


@pytest.mark.parametrize("stage", [0, 3])
def test_overlap_param_gather_needs_zero_1_or_2(stage):
    with pytest.raises(ValueError, match="overlaps ZeRO-1/2's parameter all-gather"):
        _step(stage, overlap_param_gather=True)
