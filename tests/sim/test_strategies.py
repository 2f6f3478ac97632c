"""Named strategies map to simulate_training_step options; ZeRO traffic follows the ZeRO paper."""

import pytest

from course_lib.sim import (
    STRATEGIES,
    TransformerSpec,
    make_cluster,
    simulate_training_step,
    strategy,
    zero_traffic_per_device,
)

SMALL = TransformerSpec(8, 1024, 16, 1024, 32000, name="small")


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_named_strategy_runs(name):
    n = 1 if name == "single_device" else 4
    report = simulate_training_step(SMALL, make_cluster(1, n), **strategy(name, n))
    assert report.step_time > 0 and 0 < report.mfu <= 1


def test_the_dp_table_orderings():
    cluster = make_cluster(1, 4)
    times = {name: simulate_training_step(SMALL, cluster, **strategy(name, 4)).step_time
             for name in ("parameter_server", "ring_all_reduce", "ddp")}
    assert times["parameter_server"] > times["ring_all_reduce"] > times["ddp"]


def test_zero_traffic_matches_the_paper():
    n, psi = 64, 1e9
    share = (n - 1) / n
    zero0 = sum(zero_traffic_per_device(psi, n, 0).values())
    assert zero0 == pytest.approx(2 * 2 * psi * share)
    assert sum(zero_traffic_per_device(psi, n, 1).values()) == pytest.approx(zero0)
    assert sum(zero_traffic_per_device(psi, n, 3).values()) == pytest.approx(1.5 * zero0)
    with_accumulation = [sum(zero_traffic_per_device(psi, n, s, microbatches=4).values()) for s in (1, 2, 3)]
    assert with_accumulation[0] < with_accumulation[1] < with_accumulation[2]


def test_bad_names_and_sizes():
    with pytest.raises(ValueError, match="unknown strategy"):
        strategy("horovod", 4)
    with pytest.raises(ValueError, match="world_size=1"):
        strategy("single_device", 4)
    with pytest.raises(ValueError, match="microbatches"):
        zero_traffic_per_device(1e9, 4, 2, microbatches=0)


def test_layout_search_ranks_fitting_layouts_first():
    from course_lib.sim import LLAMA3_70B, search_layouts

    rows = search_layouts(LLAMA3_70B, make_cluster(4, 8), global_batch=32, zero_stages=(0, 1))
    fitting = [r for r in rows if r["fits"]]
    assert fitting and not rows[-1]["fits"]
    assert [r["step_time"] for r in fitting] == sorted(r["step_time"] for r in fitting)
    assert all(r["dp"] * r["tp"] * r["pp"] * r["cp"] == 32 for r in rows)
