"""Every closed form of collective_time against a hand computation, and the nccl-tests bandwidths."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.sim import ALGORITHMS, OPS, Link, algorithm_bandwidth, bus_bandwidth, collective_time

A, B = 1e-5, 1e9          # alpha = 10 us, bandwidth = 1 GB/s
LINK = Link(latency=A, bandwidth=B)
S = 8e6                    # 8 MB
N = 8                      # log2 = 3

# Hand-computed: n=8, S=8e6 -> S/B = 8 ms, S/(nB) = 1 ms, alpha = 0.01 ms.
HAND = {
    ("all_reduce", "ring"): 14 * (1e-5 + 1e-3),
    ("reduce_scatter", "ring"): 7 * (1e-5 + 1e-3),
    ("all_gather", "ring"): 7 * (1e-5 + 1e-3),
    ("broadcast", "ring"): 14 * (1e-5 + 1e-3),
    ("reduce", "ring"): 14 * (1e-5 + 1e-3),
    ("scatter", "ring"): 7 * (1e-5 + 1e-3),
    ("gather", "ring"): 7 * (1e-5 + 1e-3),
    ("all_to_all", "ring"): 7 * (1e-5 + 1e-3),
    ("broadcast", "tree"): 3 * (1e-5 + 8e-3),
    ("reduce", "tree"): 3 * (1e-5 + 8e-3),
    ("all_reduce", "tree"): 6 * (1e-5 + 8e-3),
    ("scatter", "tree"): 3e-5 + 7e-3,
    ("gather", "tree"): 3e-5 + 7e-3,
    ("reduce_scatter", "tree"): 3 * (1e-5 + 8e-3) + 3e-5 + 7e-3,
    ("all_gather", "tree"): 3 * (1e-5 + 8e-3) + 3e-5 + 7e-3,
    ("all_to_all", "tree"): 3 * (1e-5 + 4e-3),
    ("all_reduce", "recursive_doubling"): 3 * (1e-5 + 8e-3),
    ("all_gather", "recursive_doubling"): 3e-5 + 7e-3,
    ("reduce_scatter", "recursive_doubling"): 3e-5 + 7e-3,
    ("broadcast", "recursive_doubling"): 3 * (1e-5 + 8e-3),
    ("reduce", "recursive_doubling"): 3 * (1e-5 + 8e-3),
    ("scatter", "recursive_doubling"): 3e-5 + 7e-3,
    ("gather", "recursive_doubling"): 3e-5 + 7e-3,
    ("all_to_all", "recursive_doubling"): 3 * (1e-5 + 4e-3),
    ("all_reduce", "parameter_server"): 14 * (1e-5 + 8e-3),
    ("reduce", "parameter_server"): 7 * (1e-5 + 8e-3),
    ("broadcast", "parameter_server"): 7 * (1e-5 + 8e-3),
    ("scatter", "parameter_server"): 7 * (1e-5 + 1e-3),
    ("gather", "parameter_server"): 7 * (1e-5 + 1e-3),
    ("all_gather", "parameter_server"): 7 * (1e-5 + 8e-3) + 7 * (1e-5 + 1e-3),
    ("reduce_scatter", "parameter_server"): 7 * (1e-5 + 8e-3) + 7 * (1e-5 + 1e-3),
    ("all_to_all", "parameter_server"): 14 * (1e-5 + 7e-3),
}


def test_every_op_and_algorithm_has_a_hand_computed_value():
    assert set(HAND) == {(op, alg) for op in OPS for alg in ALGORITHMS}


@pytest.mark.parametrize("op,algorithm", sorted(HAND))
def test_closed_form_matches_hand_computation(op, algorithm):
    assert collective_time(op, S, N, LINK, algorithm) == pytest.approx(HAND[(op, algorithm)], rel=1e-12)


@pytest.mark.parametrize("op", OPS)
def test_one_rank_costs_nothing(op):
    assert collective_time(op, S, 1, LINK) == 0.0


@settings(database=None, deadline=None)
@given(n=st.integers(2, 512), size=st.floats(1.0, 1e10))
def test_ring_all_reduce_is_reduce_scatter_plus_all_gather(n, size):
    rs = collective_time("reduce_scatter", size, n, LINK)
    ag = collective_time("all_gather", size, n, LINK)
    assert collective_time("all_reduce", size, n, LINK) == pytest.approx(rs + ag, rel=1e-12)


@settings(database=None, deadline=None)
@given(n=st.integers(2, 1024))
def test_ring_beats_parameter_server_for_large_messages(n):
    big = 1e9
    assert collective_time("all_reduce", big, n, LINK) < collective_time(
        "all_reduce", big, n, LINK, "parameter_server")


def test_ring_bandwidth_term_tends_to_twice_the_message():
    # As n grows the ring all-reduce moves 2(n-1)/n S per rank: the bus factor of nccl-tests.
    seconds = collective_time("all_reduce", 1e9, 1000, Link(0.0, 1e9))
    assert seconds == pytest.approx(2 * 999 / 1000)


def test_algbw_and_busbw_as_nccl_tests_define_them():
    seconds = collective_time("all_reduce", S, N, Link(0.0, B))
    assert algorithm_bandwidth("all_reduce", S, seconds) == pytest.approx(S / seconds)
    # With no latency a ring all-reduce runs exactly at the link bandwidth in bus terms.
    assert bus_bandwidth("all_reduce", S, seconds, N) == pytest.approx(B)
    assert bus_bandwidth("all_gather", S, 1.0, 4) == pytest.approx(S * 3 / 4)
    assert bus_bandwidth("broadcast", S, 1.0, 4) == pytest.approx(S)


@pytest.mark.parametrize("bad,match", [
    (dict(op="allreduce"), "unknown collective"),
    (dict(algorithm="butterfly"), "unknown algorithm"),
    (dict(nbytes=-1), "nbytes must be >= 0"),
    (dict(world_size=0), "world_size"),
    (dict(world_size=2.5), "world_size"),
    (dict(nbytes=math.nan), "nbytes"),
])
def test_bad_input_says_what_to_change(bad, match):
    args = dict(op="all_reduce", nbytes=1.0, world_size=4, link=LINK, algorithm="ring") | bad
    with pytest.raises(ValueError, match=match):
        collective_time(**args)


def test_bandwidth_needs_positive_time():
    with pytest.raises(ValueError, match="seconds must be > 0"):
        algorithm_bandwidth("all_reduce", 1.0, 0.0)
