"""A cluster: nodes of G devices joined by a fast intra-node link and, across nodes, one NIC per device;
optionally pods of nodes with an oversubscribed layer above them (pods.py).

``make_cluster`` builds one from a preset name or a ``HardwarePreset`` (data sheet or calibration).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..checks import whole
from ..collectives.cost import collective_time
from ..network.group_links import GroupLink, group_link, members_per_node
from .hardware import HardwarePreset, Link
from .pods import PodNetwork, above_pod_link, check_pods, members_per_full_pod
from .presets import get_network, get_preset


def _positive_int(name: str, value, hint: str = "") -> int:
    try:
        return whole(name, value, 1, hint)
    except ValueError:
        raise ValueError(f"{name} must be a positive whole number, got {value!r}{hint}") from None


@dataclass(frozen=True)
class Cluster:
    """``nodes`` nodes of ``gpus_per_node`` identical devices; rank r lives on node r // gpus_per_node.

    ``pod_gpus``: devices per pod (rank r in pod r // pod_gpus; the last pod may be partly used), with
    ``oversubscription``:1 above the pods; None (the default) is a network flat above the node, where every
    node reaches every other at its NICs' full rate.
    """

    nodes: int
    gpus_per_node: int
    preset: HardwarePreset
    pod_gpus: int | None = None
    oversubscription: float = 1.0

    def __post_init__(self):
        _positive_int("nodes", self.nodes)
        _positive_int("gpus_per_node", self.gpus_per_node)
        if not isinstance(self.preset, HardwarePreset):
            raise ValueError(f"preset must be a HardwarePreset, got {self.preset!r}; "
                             "make_cluster(nodes, gpus_per_node, 'h100') also takes a preset's name")
        check_pods(self.pod_gpus, self.oversubscription, self.gpus_per_node)

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    def node_of(self, rank: int) -> int:
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} is outside this cluster of {self.world_size} devices")
        return rank // self.gpus_per_node

    @property
    def has_pods(self) -> bool:
        return self.pod_gpus is not None and self.pod_gpus < self.world_size

    def members_per_pod(self, ranks) -> float | None:
        """The fewest of ``ranks`` in one pod (a partly used pod scaled to a full one); None inside one pod
        or on a network flat above the node."""
        return members_per_full_pod(ranks, self.pod_gpus, self.world_size) if self.has_pods else None

    def network_link(self, members_per_pod: float | None = None) -> Link:
        """One NIC's link across nodes: inside a pod (None) the full rate, for a group across pods with
        ``members_per_pod`` of it in each, its share of the oversubscribed layer (pods.above_pod_link)."""
        if members_per_pod is None or not self.has_pods:
            return self.preset.inter_node
        return above_pod_link(self.preset.inter_node, self.oversubscription, members_per_pod)

    def link_between(self, a: int, b: int) -> Link:
        """The link a message from rank a to rank b travels on: across pods, a pair is a group with one
        member in each pod, so the worst case of the layer above (NIC rate / oversubscription)."""
        if self.node_of(a) == self.node_of(b):
            return self.preset.intra_node
        return self.network_link(self.members_per_pod((a, b)))

    @property
    def nics_per_node(self) -> int:
        """NICs per node: the preset's, else one per device (rail-optimised, as DGX nodes are)."""
        return self.preset.nics_per_node or self.gpus_per_node

    def group_link(self, ranks) -> GroupLink:
        """The network a collective over ``ranks`` sees: NVLink inside one node; across nodes, hops of
        both kinds and min(members per node, NICs per node) NICs' bandwidth, capped by NVLink; across
        pods, each NIC at its oversubscribed share (network_link).

        The node with the fewest members sets the pace: it has the fewest NICs to cross with."""
        ranks = list(ranks)
        for r in ranks:
            self.node_of(r)
        counts = members_per_node(ranks, self.gpus_per_node)
        if not counts:
            raise ValueError("ranks is empty: pass the ranks of the group, for example range(8)")
        return group_link(self.preset.intra_node, self.network_link(self.members_per_pod(ranks)), len(counts),
                          min(counts.values()), self.nics_per_node)

    def collective_time(self, op: str, nbytes: float, ranks, algorithm: str = "nccl") -> float:
        """Seconds of ``op`` over ``ranks``, on their group link, as the preset's collectives run
        (``preset.ring_options``: a calibrated machine's segmented ring)."""
        ranks = list(ranks)
        return collective_time(op, nbytes, len(ranks), self.group_link(ranks), algorithm,
                               **self.preset.ring_options(op, algorithm))

    def with_links(self, intra_node: Link | None = None, inter_node: Link | None = None) -> Cluster:
        """The same cluster with a faster or slower network ("what if the network were 4x slower?")."""
        preset = dataclasses.replace(self.preset,
                                     intra_node=intra_node or self.preset.intra_node,
                                     inter_node=inter_node or self.preset.inter_node)
        return dataclasses.replace(self, preset=preset)

    def __repr__(self) -> str:
        pods = (f", pods of {self.pod_gpus} at 1:{self.oversubscription:g} above" if self.pod_gpus is not None
                else "")
        return (f"Cluster({self.nodes} node(s) x {self.gpus_per_node} {self.preset.name} "
                f"= {self.world_size} devices{pods})")


def make_cluster(nodes: int = 1, gpus_per_node: int = 8, preset: str | HardwarePreset = "h100",
                 intra_node: Link | None = None, inter_node: Link | None = None, *,
                 pod_gpus: int | None = None, oversubscription: float = 1.0,
                 network: str | PodNetwork | None = None) -> Cluster:
    """A cluster of ``nodes`` x ``gpus_per_node`` devices of one preset (a name or a HardwarePreset).

    ``intra_node`` / ``inter_node`` override the preset's links, e.g. ``inter_node=Link(10e-6, 12.5e9)``.
    Above the node the network is flat unless pods are given: ``pod_gpus`` and ``oversubscription``
    (e.g. 3072 and 7.0), or a named ``network`` that sets both (e.g. "llama3_24k", presets.py).
    """
    nodes = _positive_int("nodes", nodes)
    gpus_per_node = _positive_int("gpus_per_node", gpus_per_node)
    if network is not None:
        if pod_gpus is not None or oversubscription != 1.0:
            raise ValueError(f"network={network!r} sets pod_gpus and oversubscription itself: give either "
                             "network= or pod_gpus= and oversubscription=, not both")
        network = get_network(network)
        pod_gpus, oversubscription = network.pod_gpus, network.oversubscription
        if nodes * gpus_per_node > network.gpus:
            raise ValueError(f"{nodes} nodes x {gpus_per_node} = {nodes * gpus_per_node} GPUs, but the "
                             f"{network.name} network has {network.gpus}: use at most "
                             f"{network.gpus // gpus_per_node} nodes")
    cluster = Cluster(nodes, gpus_per_node, get_preset(preset), pod_gpus, oversubscription)
    if intra_node is not None or inter_node is not None:
        cluster = cluster.with_links(intra_node, inter_node)
    return cluster
