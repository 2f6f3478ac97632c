"""Every closed form of collective_time against a hand computation, and the nccl-tests bandwidths."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.sim import (
    ALGORITHM_OPS,
    ALGORITHMS,
    OPS,
    Link,
    algorithm_bandwidth,
    bus_bandwidth,
    collective_time,
    ring_segments,
)

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
    # NCCL's pipelined tree: depth log2 8 = 3 hops up and 3 down, then 2S/B of streaming.
    ("all_reduce", "double_binary_tree"): 6e-5 + 16e-3 / 0.92,   # NCCL's tree: 92% of the bus bandwidth
    # A plain Link has no nodes: hierarchical is the ring.
    ("all_reduce", "hierarchical"): 14 * (1e-5 + 1e-3),
    ("reduce_scatter", "hierarchical"): 7 * (1e-5 + 1e-3),
    ("all_gather", "hierarchical"): 7 * (1e-5 + 1e-3),
    # Every share sent at once: one latency, then 7/8 of the buffer over the link.
    ("all_to_all", "pairwise"): 1e-5 + 7e-3,
    ("scatter", "pairwise"): 1e-5 + 7e-3,
    ("gather", "pairwise"): 1e-5 + 7e-3,
    # NCCL's broadcast and reduce: 7 hops' latency, then the buffer once at the link's rate.
    ("broadcast", "pipelined_ring"): 7e-5 + 8e-3,
    ("reduce", "pipelined_ring"): 7e-5 + 8e-3,
    # NCCL's choice: the fastest it has for the op (the ring beats the tree's 2S/B at 8 MB here).
    ("all_reduce", "nccl"): 14 * (1e-5 + 1e-3),
    ("reduce_scatter", "nccl"): 7 * (1e-5 + 1e-3),
    ("all_gather", "nccl"): 7 * (1e-5 + 1e-3),
    ("broadcast", "nccl"): 7e-5 + 8e-3,
    ("reduce", "nccl"): 7e-5 + 8e-3,
    ("scatter", "nccl"): 1e-5 + 7e-3,
    ("gather", "nccl"): 1e-5 + 7e-3,
    ("all_to_all", "nccl"): 1e-5 + 7e-3,
}


def test_every_op_and_algorithm_has_a_hand_computed_value():
    runs = {(op, alg) for op in OPS for alg in ALGORITHMS if op in ALGORITHM_OPS.get(alg, OPS)}
    assert set(HAND) == runs


@pytest.mark.parametrize("op,algorithm", [("broadcast", "double_binary_tree"),
                                         ("all_to_all", "hierarchical")])
def test_algorithms_refuse_ops_they_do_not_run(op, algorithm):
    with pytest.raises(ValueError, match="use algorithm='ring'"):
        collective_time(op, S, N, LINK, algorithm)


@pytest.mark.parametrize("op,algorithm", sorted(HAND))
def test_closed_form_matches_hand_computation(op, algorithm):
    assert collective_time(op, S, N, LINK, algorithm) == pytest.approx(HAND[(op, algorithm)], rel=1e-12)


@pytest.mark.parametrize("op", OPS)
def test_one_rank_costs_nothing(op):
    assert collective_time(op, S, 1, LINK) == 0.0


@settings(database=None, deadline=None)
@given(n=st.integers(2, 512), size=st.floats(1.0, 1e10))
def test_ring_all_reduce_is_reduce_scatter_plus_all_gather(n, size):
    rs = collective_time("reduce_scatter", size, n, LINK, "ring")
    ag = collective_time("all_gather", size, n, LINK, "ring")
    assert collective_time("all_reduce", size, n, LINK, "ring") == pytest.approx(rs + ag, rel=1e-12)


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


# gloo-style segmented ring, by hand. 8 MB on 8 ranks, segments of at most 0.25 MB: 32 segments (4 per
# chunk), 28 of them move per phase, each alpha + 0.25 ms.
def test_segmented_ring_by_hand():
    assert math.isclose(collective_time("all_reduce", S, N, LINK, segment_bytes=0.25e6),
                        2 * 28 * (1e-5 + 0.25e-3))
    assert math.isclose(collective_time("reduce_scatter", S, N, LINK, segment_bytes=0.25e6),
                        28 * (1e-5 + 0.25e-3))


def test_segmented_ring_cuts_at_least_two_segments_per_chunk():
    # segments larger than a chunk still give 2 per chunk (16 in all), 14 per phase of 0.5 ms
    assert ring_segments(S, N, 1e9) == (16, 0.5e6)
    assert math.isclose(collective_time("all_gather", S, N, LINK, segment_bytes=1e9), 14 * (1e-5 + 0.5e-3))
    # 5 MB on 3 ranks with 1 MB segments: 5 rounded up to a multiple of 3 and at least 6 -> 6
    assert ring_segments(5e6, 3, 1e6) == (6, 5e6 / 6)


@given(st.floats(1e3, 1e10), st.integers(2, 64), st.floats(1e3, 1e8))
def test_segments_move_the_same_bytes_and_cost_at_least_the_plain_ring(nbytes, n, segment):
    free_link = Link(latency=0.0, bandwidth=B)
    plain = collective_time("all_reduce", nbytes, n, free_link)
    assert math.isclose(collective_time("all_reduce", nbytes, n, free_link, segment_bytes=segment), plain)
    assert collective_time("all_reduce", nbytes, n, LINK, segment_bytes=segment) >= \
        collective_time("all_reduce", nbytes, n, LINK) * (1 - 1e-12)


# Two in flight: 28 segments per phase as above; the first two pay alpha + 0.25 ms, the other 26 only
# their 0.25 ms (a latency of 10 us is far below a transfer, so it hides completely).
def test_segments_in_flight_hide_the_latency_of_all_but_the_first_by_hand():
    assert math.isclose(collective_time("all_reduce", S, N, LINK, segment_bytes=0.25e6, in_flight=2),
                        2 * (2 * (1e-5 + 0.25e-3) + 26 * 0.25e-3))
    assert math.isclose(collective_time("all_reduce", S, N, LINK, segment_bytes=0.25e6, in_flight=1),
                        collective_time("all_reduce", S, N, LINK, segment_bytes=0.25e6))
    # a latency longer than two transfers is shared by the two in flight: (1 ms + 0.25 ms) / 2 each
    slow = Link(latency=1e-3, bandwidth=B)
    assert math.isclose(collective_time("reduce_scatter", S, N, slow, segment_bytes=0.25e6, in_flight=2),
                        2 * 1.25e-3 + 26 * 1.25e-3 / 2)


@given(st.floats(1e3, 1e10), st.integers(2, 64), st.floats(1e3, 1e8), st.integers(2, 8))
def test_more_in_flight_never_costs_more_nor_less_than_the_bytes(nbytes, n, segment, in_flight):
    serial = collective_time("all_reduce", nbytes, n, LINK, segment_bytes=segment)
    overlapped = collective_time("all_reduce", nbytes, n, LINK, segment_bytes=segment, in_flight=in_flight)
    bytes_only = collective_time("all_reduce", nbytes, n, Link(latency=0.0, bandwidth=B))
    assert bytes_only * (1 - 1e-12) <= overlapped <= serial * (1 + 1e-12)


@pytest.mark.parametrize("bad, match", [(dict(in_flight=0), "in_flight"), (dict(in_flight=1.5), "in_flight"),
                                        (dict(in_flight=2, segment_bytes=None), "needs segment_bytes")])
def test_in_flight_refused_where_it_means_nothing(bad, match):
    args = dict(segment_bytes=0.25e6) | bad
    with pytest.raises(ValueError, match=match):
        collective_time("all_reduce", S, N, LINK, **args)


@pytest.mark.parametrize("op, algorithm, segment", [
    ("broadcast", "ring", 1e6), ("all_reduce", "tree", 1e6), ("all_reduce", "ring", 0),
    ("all_reduce", "ring", float("nan")),
])
def test_segment_bytes_refused_where_it_means_nothing(op, algorithm, segment):
    with pytest.raises(ValueError, match="segment_bytes"):
        collective_time(op, S, N, LINK, algorithm, segment_bytes=segment)
