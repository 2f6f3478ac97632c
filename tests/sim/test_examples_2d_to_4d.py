"""The seed's walk from 0D to 4D: seed_nd agrees with seed_0d/seed_1d and adds each dimension's messages."""

import pytest

from course_lib.sim import seed_0d, seed_1d, seed_nd


def test_no_parallelism_is_the_seed_0d():
    assert seed_nd()[0] == pytest.approx(seed_0d()[0])


@pytest.mark.parametrize("world_size", [2, 4, 8])
def test_data_parallel_alone_is_the_seed_1d_with_the_correct_ring(world_size):
    assert seed_nd(dp=world_size)[0] == pytest.approx(seed_1d(world_size, ring="correct")[0])


def test_the_chapter_08_ordering_on_8_gpus():
    one_d, two_d, three_d = seed_nd(dp=8)[0], seed_nd(dp=4, tp=2)[0], seed_nd(dp=2, tp=2, pp=2)[0]
    assert two_d < one_d < three_d


def test_each_dimension_sends_its_own_messages():
    _, timeline = seed_nd(dp=2, tp=2, pp=2, cp=2)
    labels = {event.label for lane in timeline.lanes for event in lane}
    for word in ("TP all-reduce", "CP keys/values", "activations", "gradient ring"):
        assert any(word in label for label in labels), word
    assert len(timeline.lanes) == 16


def test_tensor_parallel_alone_on_one_item():
    # 1 item of 20 units over 2 peers: 10 units (1.0 s), then a 2-step ring of 5 units each:
    # per step a send (0.05 + 0.05) and a receive (0.05).
    seconds, _ = seed_nd(tp=2, items=1)
    assert seconds == pytest.approx(1.0 + 2 * (0.1 + 0.05))


@pytest.mark.parametrize("bad", [dict(dp=0), dict(tp=1.5), dict(dp=3), dict(units_per_item=-1)])
def test_bad_arguments_say_what_is_wrong(bad):
    with pytest.raises(ValueError):
        seed_nd(**bad)
