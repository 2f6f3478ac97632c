"""Rabenseifner's all-reduce (recursive halving, then recursive doubling) against its closed form, and
where it stands beside the ring and recursive doubling that chapter 02 prices it against."""

import math

import pytest

from course_lib.sim import Link, collective_time, rabenseifner_all_reduce

LINK = Link(latency=10e-6, bandwidth=50e9)     # chapter 02's InfiniBand-like link


def _closed_form(nbytes, p, link, gamma=0.0):
    # Thakur, Rabenseifner and Gropp 2005 (IJHPCA 19(1)): 2 lg p alpha + 2 (p-1)/p n beta + (p-1)/p n gamma
    return (2 * math.log2(p) * link.latency + 2 * (p - 1) / p * nbytes / link.bandwidth
            + (p - 1) / p * nbytes * gamma)


@pytest.mark.parametrize("p", [2, 4, 64, 1024])
@pytest.mark.parametrize("nbytes", [0, 4096, 100e6])
def test_the_rounds_add_up_to_the_papers_closed_form(p, nbytes):
    assert math.isclose(rabenseifner_all_reduce(nbytes, p, LINK), _closed_form(nbytes, p, LINK),
                        abs_tol=1e-15)
    gamma = 1e-10                               # 10 GB/s of additions
    assert math.isclose(rabenseifner_all_reduce(nbytes, p, LINK, gamma), _closed_form(nbytes, p, LINK, gamma),
                        abs_tol=1e-15)


def test_one_rank_costs_nothing_and_two_ranks_cost_what_the_ring_does():
    assert rabenseifner_all_reduce(1e6, 1, LINK) == 0.0
    ring = collective_time("all_reduce", 1e6, 2, LINK, "ring")
    assert math.isclose(rabenseifner_all_reduce(1e6, 2, LINK), ring)


@pytest.mark.parametrize("p", [4, 64, 1024])
def test_it_sends_the_rings_bytes_with_2_log2_p_latencies_instead_of_2_p_minus_1(p):
    # Same bandwidth term as the ring, so it is strictly faster from 4 ranks on; the saving is all latency.
    for nbytes in (1e3, 1e6, 1e9):
        ring = collective_time("all_reduce", nbytes, p, LINK, "ring")
        rabenseifner = rabenseifner_all_reduce(nbytes, p, LINK)
        assert rabenseifner < ring
        assert math.isclose(ring - rabenseifner, (2 * (p - 1) - 2 * math.log2(p)) * LINK.latency)


def test_recursive_doubling_wins_only_below_the_size_where_halving_pays_its_extra_latencies():
    p = 64
    flip = math.log2(p) * LINK.latency * LINK.bandwidth / (math.log2(p) - 2 * (p - 1) / p)
    for nbytes, doubling_wins in ((flip / 2, True), (flip * 2, False)):
        doubling = collective_time("all_reduce", nbytes, p, LINK, "recursive_doubling")
        assert (doubling < rabenseifner_all_reduce(nbytes, p, LINK)) == doubling_wins


@pytest.mark.parametrize("p", [3, 6, 1000])
def test_a_world_size_that_is_not_a_power_of_two_is_refused_with_mpichs_way_round_it(p):
    with pytest.raises(ValueError, match="power of two.*folds the extra ranks"):
        rabenseifner_all_reduce(1e6, p, LINK)


@pytest.mark.parametrize("bad", [-1.0, math.nan, "1"])
def test_a_bad_reduction_cost_is_named(bad):
    with pytest.raises(ValueError, match="seconds_per_reduced_byte"):
        rabenseifner_all_reduce(1e6, 4, LINK, bad)
