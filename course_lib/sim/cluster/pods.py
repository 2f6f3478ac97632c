"""The network tier above the node: pods with full bisection inside and an oversubscribed layer above them.

``PodNetwork`` names one such network (a preset, with its source); ``check_pods`` validates a cluster's pod
settings; ``above_pod_link`` is the link a group pays for once its ranks sit in more than one pod.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..checks import amount, whole
from ..network.links import Link


@dataclass(frozen=True)
class PodNetwork:
    """Pods of ``pod_gpus`` GPUs (nodes whole) joined above by a layer oversubscribed ``oversubscription``:1.

    ``gpus`` is the whole cluster the network was built for; a job may use fewer of them
    (``make_cluster(nodes, network=...)``), its ranks filling pods from the first.
    """

    name: str
    pod_gpus: int
    oversubscription: float
    gpus: int
    source: str

    def __post_init__(self):
        check_pods(self.pod_gpus, self.oversubscription, gpus_per_node=1)
        if whole(f"network {self.name!r}: gpus", self.gpus) < self.pod_gpus:
            raise ValueError(f"network {self.name!r}: gpus={self.gpus} is fewer than one pod of "
                             f"{self.pod_gpus}: give the whole cluster's GPUs")


def check_pods(pod_gpus, oversubscription, gpus_per_node: int) -> None:
    """ValueError, saying what to change, unless the pod settings describe a network a cluster can have."""
    amount("oversubscription", oversubscription, unit="(7.0 for a 1:7 layer above the pod)")
    if oversubscription < 1:
        raise ValueError(f"oversubscription must be >= 1 (the layer above a pod carries 1/oversubscription "
                         f"of what its GPUs can send: 7.0 for 1:7, 1.0 for full bisection), "
                         f"got {oversubscription!r}")
    if pod_gpus is None:
        if oversubscription != 1:
            raise ValueError(f"oversubscription={oversubscription!r} is the ratio above a pod, but pod_gpus "
                             "is None (the network is flat above the node): give pod_gpus, e.g. "
                             "pod_gpus=3072, or leave oversubscription at 1.0")
        return
    pod_gpus = whole("pod_gpus", pod_gpus, hint=" (GPUs per pod; None for a network flat above the node)")
    if pod_gpus % gpus_per_node:
        nodes = math.ceil(pod_gpus / gpus_per_node)
        raise ValueError(f"pod_gpus={pod_gpus} is not a whole number of nodes of {gpus_per_node} GPUs (a "
                         f"node sits in one pod): use a multiple of {gpus_per_node}, e.g. "
                         f"{nodes * gpus_per_node}")


def members_per_full_pod(ranks, pod_gpus: int, world_size: int) -> float | None:
    """The fewest members ``ranks`` have in one pod, counted as if the job filled that pod (a pod the job
    uses only part of still has the whole pod's links above it); None when the ranks sit in one pod."""
    counts: dict = {}
    for r in ranks:
        counts[r // pod_gpus] = counts.get(r // pod_gpus, 0) + 1
    if len(counts) < 2:
        return None
    return min(n * pod_gpus / min(pod_gpus, world_size - pod * pod_gpus) for pod, n in counts.items())


def above_pod_link(inter_node: Link, oversubscription: float, members_per_pod: float) -> Link:
    """One NIC's link for a group that crosses pods, ``members_per_pod`` of it in each pod (at the fewest).

    The layer above a pod carries pod_gpus / oversubscription NICs' worth: Llama 3's cluster (Dubey et al.
    2024, arXiv 2407.21783, section 3.3.1, "Network topology") has "a pod of 3,072 GPUs with full bisection
    bandwidth" and above it an aggregation layer with "an oversubscription ratio of 1:7". In a synchronous
    step every group of a dimension communicates at once, and a ring (or a pipeline's chain of sends) over a
    group ordered by rank leaves each pod on one hop: a pod holding m members of each group sends
    pod_gpus / m streams across at once, so each stream gets min(1, m / oversubscription) of a NIC. With
    m = 1 (every GPU's traffic crosses) that is the worst case, inter_node.bandwidth / oversubscription;
    data parallel outermost over 3,072-GPU pods keeps m large (24 members of each group per pod at DP 128
    on 16,384 GPUs), so its rings run at the NIC's full rate. Not modelled: the extra switch hops' latency
    (the paper gives none; the link keeps the NIC's) and traffic of other jobs.
    """
    share = min(1.0, members_per_pod / oversubscription)
    if share == 1.0:
        return inter_node
    return Link(inter_node.latency, inter_node.bandwidth * share)
