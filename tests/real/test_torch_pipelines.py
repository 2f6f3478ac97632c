"""PyTorch's zero-bubble schedules, read into the simulator and run for real on gloo (torch 2.13)."""

import pytest

from course_lib import sim
from course_lib.real.pytorch.torch_pipelines import PLACEMENTS, run_torch_schedule, torch_schedule


@pytest.mark.parametrize("name", list(PLACEMENTS))
@pytest.mark.parametrize("stages, microbatches", [(2, 4), (4, 8), (4, 12)])
def test_torchs_orders_play_in_the_simulator_and_idle_only_the_unavoidable(name, stages, microbatches):
    schedule = torch_schedule(name, stages, microbatches)
    assert schedule.placement == PLACEMENTS[name] and schedule.virtual_stages == 2
    timeline = sim.simulate_pipeline(schedule, 1.0, 1.0, t_weight=1.0)
    # no schedule can idle less: the stage p-1 chunk waits for p-1 chunk forwards (half a stage each)
    assert timeline.makespan - 3 * microbatches == pytest.approx((stages - 1) * 0.5)


def test_the_split_backward_is_read_as_b_then_w_and_dualpipev_mixes_whole_and_split_backwards():
    zbv = torch_schedule("ZBVZeroBubble", 2, 4)
    assert all(len(split) == 2 * 4 for split in zbv.split)          # every backward split in B and W
    dualpipe = torch_schedule("DualPipeV", 4, 8)
    assert 0 < sum(len(split) for split in dualpipe.split) < 2 * 4 * 8   # some whole, some split
    held = sim.simulate_pipeline(dualpipe, 1.0, 1.0, t_weight=1.0).peak_activations
    assert 2 * max(held) == 2 * 4 + 1        # PP + 1 chunks' worth, as DualPipe's README states


def test_an_unknown_schedule_is_named():
    with pytest.raises(ValueError, match="use one of InterleavedZeroBubble"):
        torch_schedule("ZB-H1", 4, 8)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PLACEMENTS))
def test_torchs_zero_bubble_step_on_gloo_equals_one_process(name):
    result = run_torch_schedule(name, world_size=2, microbatches=4, seed=3)
    assert result["largest_difference"] < 1e-6
    assert result["loss"] == pytest.approx(result["one_process_loss"], rel=1e-5)
