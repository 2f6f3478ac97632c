"""The bucket model of chapter 03: latency shares, CS336's overhead and its optimum, the pipeline played."""

import math

import pytest

from course_lib import sim
from course_lib.sim import (
    all_reduce_terms,
    bucketed_overhead,
    buckets_after_backward,
    latency_seconds,
    latency_share,
    optimal_bucket_bytes,
)

S, OVERHEAD, W = 4.2e6, 1e-4, 1e9


def test_the_latency_is_the_time_of_an_empty_buffer_and_each_hop_pays_its_own_link():
    link = sim.make_cluster(128, 8).group_link(range(1024))
    # a ring over 128 nodes: per phase 895 NVLink hops (3.4 us) and 128 network hops (14 us)
    assert math.isclose(latency_seconds("all_reduce", 1024, link), 2 * (895 * 3.4e-6 + 128 * 14e-6))
    plain = sim.Link(1e-5, 1e9)
    assert math.isclose(latency_seconds("all_reduce", 8, plain), 2 * 7 * 1e-5)


@pytest.mark.parametrize("algorithm", ["ring", "double_binary_tree", "tree", "parameter_server"])
@pytest.mark.parametrize("nodes", [1, 8, 128])
def test_a_latency_share_is_between_0_and_1_and_grows_as_the_buffer_shrinks(algorithm, nodes):
    link = sim.make_cluster(nodes, 8).group_link(range(8 * nodes))
    shares = [latency_share("all_reduce", s, 8 * nodes, link, algorithm) for s in (1e3, 25 * 2**20, 1e10)]
    assert all(0 <= share <= 1 for share in shares)
    assert shares[0] > shares[1] > shares[2]
    assert latency_share("all_reduce", 0, 8 * nodes, link, algorithm) == 1


def test_one_rank_has_no_latency_to_share():
    assert latency_share("all_reduce", 1e6, 1, sim.Link()) == 0.0


def test_the_all_reduce_is_a_per_call_cost_plus_bytes_at_the_algorithm_bandwidth():
    link = sim.Link(2e-5, 1e9)
    per_call, bandwidth = all_reduce_terms(4, link)
    assert math.isclose(per_call, 2 * 3 * 2e-5) and math.isclose(bandwidth, 4 * 1e9 / (2 * 3))
    for size in (1e3, 1e6, 1e9):
        ring = sim.collective_time("all_reduce", size, 4, link, "ring")
        assert math.isclose(per_call + size / bandwidth, ring)


@pytest.mark.parametrize("buckets", [1, 2, 4, 8, 16])
def test_under_cs336s_assumption_the_overhead_is_its_closed_form(buckets):
    closed_form = buckets * OVERHEAD + S / (buckets * W)
    assert math.isclose(bucketed_overhead(S, S / buckets, OVERHEAD, W), closed_form)


def test_the_closed_form_optimum_minimises_it():
    best = optimal_bucket_bytes(S, OVERHEAD, W)
    assert math.isclose(best, math.sqrt(S * W * OVERHEAD))
    around = (math.floor(S / best), math.ceil(S / best))       # whole numbers of buckets either side
    at_best = min(bucketed_overhead(S, S / n, OVERHEAD, W) for n in around)
    assert all(bucketed_overhead(S, S / n, OVERHEAD, W) >= at_best for n in range(1, 40))
    assert optimal_bucket_bytes(1e3, 1.0, 1e12) == 1e3    # never more than all the gradients


def test_a_backward_slower_than_the_network_hides_all_but_the_last_bucket():
    slow_backward = 1.0
    tail = buckets_after_backward([S / 4] * 4, OVERHEAD, W, slow_backward)
    assert math.isclose(tail, OVERHEAD + S / 4 / W)
    assert buckets_after_backward([], OVERHEAD, W, 1.0) == 0.0
    # a bucket that does not exist yet cannot go out: the single bucket waits for the whole backward
    assert math.isclose(buckets_after_backward([S], OVERHEAD, W, slow_backward), OVERHEAD + S / W)


def test_bad_bucket_arguments_are_named():
    with pytest.raises(ValueError, match="bucket_bytes"):
        bucketed_overhead(S, 0, OVERHEAD, W)
    with pytest.raises(ValueError, match="bandwidth"):
        buckets_after_backward([1.0], OVERHEAD, 0, 1.0)
    with pytest.raises(ValueError, match="per_call"):
        optimal_bucket_bytes(S, -1, W)
