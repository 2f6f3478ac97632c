"""Presets, clusters and the links between their ranks."""

import dataclasses

import pytest

from course_lib.sim import H100, PRESETS, HardwarePreset, Link, make_cluster, preset_from_measurements


def test_every_preset_names_its_source():
    for preset in PRESETS.values():
        assert preset.source and preset.source != "measured"
        assert preset.mfu_flops >= preset.flops


def test_links_inside_and_across_nodes():
    cluster = make_cluster(2, 8, "h100")
    assert cluster.world_size == 16
    assert cluster.link_between(0, 7) == H100.intra_node
    assert cluster.link_between(7, 8) == H100.inter_node
    inside, across = cluster.group_link(range(8)), cluster.group_link([0, 8])
    assert (inside.latency, inside.bandwidth) == (H100.intra_node.latency, H100.intra_node.bandwidth)
    assert (across.latency, across.bandwidth) == (H100.inter_node.latency, H100.inter_node.bandwidth)


def test_make_cluster_accepts_a_measured_preset():
    measured = preset_from_measurements(flops=5e10, memory_bytes=8e9, intra_latency=2e-5,
                                        intra_bandwidth=2e9)
    cluster = make_cluster(1, 4, preset=measured)
    assert cluster.preset is measured and cluster.preset.inter_node == measured.intra_node
    calibrated = HardwarePreset("calibrated", 1e11, 1e10, Link(1e-5, 1e9), Link(1e-4, 1e8))
    assert make_cluster(2, 2, calibrated).link_between(0, 3) == Link(1e-4, 1e8)


def test_slower_network_what_if():
    slow = make_cluster(4, 8, inter_node=Link(10e-6, 12.5e9))
    fast = make_cluster(4, 8)
    ranks = [0, 8, 16, 24]
    assert slow.collective_time("all_reduce", 1e9, ranks) > 3 * fast.collective_time("all_reduce", 1e9, ranks)


@pytest.mark.parametrize("kwargs,match", [
    (dict(nodes=0), "nodes must be a positive"),
    (dict(gpus_per_node=-8), "gpus_per_node"),
    (dict(preset="tpu"), "unknown hardware preset"),
])
def test_bad_cluster_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_cluster(**({"nodes": 1} | kwargs))


def test_preset_rejects_peak_below_sustained():
    with pytest.raises(ValueError, match="peak_flops"):
        dataclasses.replace(H100, peak_flops=H100.flops / 2)
