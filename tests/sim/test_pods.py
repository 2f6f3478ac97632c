"""The tier above the node: pods with full bisection inside and an oversubscribed layer above (issue 52)."""

import dataclasses
import math

import pytest

from course_lib import sim
from course_lib.sim import H100, LLAMA3_24K, Link, make_cluster

RUN_16K = sim.search.published.LLAMA3_16K


def _step(cluster, placement):
    return sim.simulate_training_step(RUN_16K.model, cluster, **dict(RUN_16K.layout, placement=placement))


def test_the_llama3_network_preset_is_the_papers_cluster():
    # Dubey et al. 2024, arXiv 2407.21783, section 3.3.1: 24K GPUs, pods of 3,072 with full bisection,
    # 1:7 oversubscribed above them
    assert (LLAMA3_24K.pod_gpus, LLAMA3_24K.oversubscription, LLAMA3_24K.gpus) == (3072, 7.0, 24576)
    assert "2407.21783" in LLAMA3_24K.source and "3.3.1" in LLAMA3_24K.source
    assert sim.NETWORKS["llama3_24k"] is LLAMA3_24K and sim.get_network("Llama3_24K") is LLAMA3_24K
    cluster = make_cluster(2048, 8, network="llama3_24k")
    assert (cluster.pod_gpus, cluster.oversubscription) == (3072, 7.0)
    assert "pods of 3072 at 1:7" in repr(cluster)


def test_a_group_across_pods_is_slower_than_one_inside_a_pod_of_the_same_size():
    cluster = make_cluster(8, 8, pod_gpus=32, oversubscription=7.0)    # two pods of four nodes
    inside, across = [0, 8, 16, 24], [0, 8, 32, 40]                    # four nodes each, one GPU per node
    assert cluster.members_per_pod(inside) is None and cluster.members_per_pod(across) == 2
    assert cluster.group_link(inside).bandwidth == H100.inter_node.bandwidth
    # two members of the group per pod: a ring leaves the pod on one hop of every group, 32 / 2 streams on
    # 32 / 7 NICs' worth above the pod
    assert cluster.group_link(across).bandwidth == pytest.approx(H100.inter_node.bandwidth * 2 / 7)
    assert (cluster.collective_time("all_reduce", 1e9, across)
            > 3 * cluster.collective_time("all_reduce", 1e9, inside))


def test_every_gpu_crossing_gets_its_nic_divided_by_the_oversubscription():
    cluster = make_cluster(2048, 8, network=LLAMA3_24K)
    assert cluster.link_between(0, 8) == H100.inter_node                 # two nodes of one pod
    assert cluster.link_between(0, 3072) == Link(H100.inter_node.latency, H100.inter_node.bandwidth / 7)
    assert cluster.link_between(0, 1) == H100.intra_node


def test_with_as_many_members_per_pod_as_the_oversubscription_the_layer_above_is_no_bottleneck():
    cluster = make_cluster(16, 8, pod_gpus=64, oversubscription=7.0)     # two pods of eight nodes
    for per_pod, share in ((8, 1.0), (7, 1.0), (6, 6 / 7), (1, 1 / 7)):
        group = [pod * 64 + 8 * node for pod in (0, 1) for node in range(per_pod)]   # one GPU per node
        assert cluster.members_per_pod(group) == per_pod
        assert cluster.group_link(group).bandwidth == pytest.approx(H100.inter_node.bandwidth * share)


def test_a_partly_used_pod_counts_its_members_as_a_full_pod():
    # 16,384 GPUs on 3,072-GPU pods: the sixth pod holds 1,024 of the job's GPUs under the whole pod's links
    cluster = make_cluster(2048, 8, network=LLAMA3_24K)
    assert cluster.members_per_pod(range(0, 16384, 1024)) == 3              # one member in the last pod
    assert cluster.members_per_pod(range(0, 16384, 128)) == 24


def test_a_flat_cluster_is_unchanged():
    flat = make_cluster(2048, 8)
    assert (flat.pod_gpus, flat.oversubscription, flat.has_pods) == (None, 1.0, False)
    one_pod = make_cluster(2048, 8, pod_gpus=16384, oversubscription=7.0)
    no_taper = make_cluster(2048, 8, pod_gpus=3072, oversubscription=1.0)
    ranks = range(0, 16384, 128)
    for cluster in (one_pod, no_taper):
        assert cluster.group_link(ranks) == flat.group_link(ranks)
        assert cluster.link_between(0, 8000) == flat.link_between(0, 8000) == H100.inter_node
    for order in sim.PLACEMENTS.values():
        steps = {_step(cluster, order).step_time for cluster in (one_pod, no_taper, flat)}
        assert len(steps) == 1
    assert _step(flat, sim.LLAMA3_ORDER).step_time == sim.simulate_published(
        dataclasses.replace(RUN_16K, layout=dict(RUN_16K.layout, placement=sim.LLAMA3_ORDER))).step_time


def test_the_two_placement_orders_differ_on_llama3s_pods_and_not_on_a_flat_network():
    flat, pods = make_cluster(2048, 8), make_cluster(2048, 8, network="llama3_24k")
    megatron, llama = (sim.MEGATRON_CORE_ORDER, sim.LLAMA3_ORDER)
    assert _step(flat, megatron).step_time == _step(flat, llama).step_time
    # Megatron-Core's order puts pipeline parallel outermost: each stage's 1,024 GPUs send their
    # activations across a pod boundary at once (3 stages per pod); Llama 3's keeps a pipeline inside a pod
    # and sends only data parallel's reductions across, 24 members of each group per pod (> 7: full rate)
    assert _step(pods, llama).step_time == _step(flat, llama).step_time
    assert _step(pods, megatron).step_time > 1.005 * _step(pods, llama).step_time
    pipeline_megatron = range(0, 16384, 1024)     # the pp group of rank 0 under Megatron-Core's order
    data_llama = range(0, 16384, 128)             # the dp group of rank 0 under Llama 3's
    assert pods.group_link(pipeline_megatron).bandwidth == pytest.approx(H100.inter_node.bandwidth * 3 / 7)
    assert pods.group_link(data_llama).bandwidth == H100.inter_node.bandwidth


@pytest.mark.parametrize("kwargs,match", [
    (dict(pod_gpus=12), "not a whole number of nodes of 8 GPUs.*multiple of 8, e.g. 16"),
    (dict(pod_gpus=0, oversubscription=7.0), "pod_gpus must be a whole number >= 1"),
    (dict(pod_gpus=2.5), "pod_gpus must be a whole number"),
    (dict(pod_gpus=16, oversubscription=0.5), "oversubscription must be >= 1"),
    (dict(pod_gpus=16, oversubscription=math.nan), "oversubscription must be a finite number"),
    (dict(pod_gpus=16, oversubscription=math.inf), "oversubscription must be a finite number"),
    (dict(oversubscription=7.0), "pod_gpus is None.*give pod_gpus"),
    (dict(network="llama3_24k", pod_gpus=3072), "not both"),
    (dict(network="llama3_24k", oversubscription=7.0), "not both"),
    (dict(network="fat_tree"), "unknown network 'fat_tree'; use one of \\['llama3_24k'\\]"),
    (dict(nodes=4096, network="llama3_24k"), "has 24576: use at most 3072 nodes"),
])
def test_every_wrong_pod_setting_says_what_to_change(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_cluster(**({"nodes": 2, "gpus_per_node": 8} | kwargs))


def test_a_pod_network_preset_checks_itself():
    with pytest.raises(ValueError, match="oversubscription must be >= 1"):
        dataclasses.replace(LLAMA3_24K, oversubscription=0.9)
    with pytest.raises(ValueError, match="fewer than one pod"):
        dataclasses.replace(LLAMA3_24K, gpus=1024)
