"""The network one collective's group sees on a rail-optimised cluster: NVLink hops inside a node, NIC hops
across nodes, and the bandwidth the group gets across nodes from the NICs its members bring.

A ``GroupLink`` is a ``Link`` (so every closed form takes it) that also knows its hops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..checks import whole
from .links import Link


@dataclass(frozen=True)
class GroupLink(Link):
    """The links of a group of ranks: ``nodes`` nodes with at least ``per_node`` members on each.

    ``bandwidth`` is what a ring over the group runs at: inside one node the intra-node link; across
    nodes min(per_node x one NIC, the node's NICs, the intra-node link), because on a rail-optimised
    cluster every GPU has its own NIC and NCCL runs one ring per channel, each crossing nodes on a
    different NIC (NCCL user guide, "NCCL_CROSS_NIC"; DGX H100 has one 400 Gb/s ConnectX-7 per GPU).
    ``latency`` is the slowest hop's (a NIC hop as soon as the group spans nodes): what one message
    between two members on different nodes pays. The collectives read the hops themselves.
    """

    nodes: int = 1
    per_node: int = 1
    intra: Link = Link()
    nic: Link = Link()
    nics_per_node: int = 1

    @property
    def spans_nodes(self) -> bool:
        return self.nodes > 1

    def ring_latency(self, steps: int) -> float:
        """Latency of ``steps`` ring steps of one phase, each hop paying its own link's latency.

        A segment travels the ring pipelined, so its latency adds up hop by hop (NCCL's tuning model,
        src/graph/tuning.cc: intra-node steps pay the NVLink latency, steps crossing nodes the network's).
        A phase's slowest chunk crosses every node boundary it can: min(steps, nodes) network hops.
        """
        crossings = min(steps, self.nodes) if self.spans_nodes else 0
        return (steps - crossings) * self.intra.latency + crossings * self.nic.latency

    def rail(self) -> Link:
        """One rank's share of its node's NICs: the link of one of the per-node rings across nodes
        (hierarchical all-reduce) and of one message between two nodes."""
        share = min(self.nic.bandwidth, self.nics_per_node * self.nic.bandwidth / self.per_node,
                    self.intra.bandwidth)
        return Link(self.nic.latency, share)

    def level_links(self, n: int) -> list:
        """Point-to-point link of each level of a binomial tree over ``n`` ranks, largest distance first:
        a level whose partners are at least ``per_node`` ranks apart crosses nodes on one NIC."""
        levels = math.ceil(math.log2(n)) if n > 1 else 0
        distances = [1 << (levels - 1 - k) for k in range(levels)]
        return [self.rail() if self.spans_nodes and d >= self.per_node else self.intra for d in distances]


def group_link(intra: Link, nic: Link, nodes: int, per_node: int, nics_per_node: int) -> GroupLink:
    """The GroupLink of a group spread over ``nodes`` nodes with at least ``per_node`` members on each."""
    nodes = whole("nodes", nodes)
    per_node = whole("per_node", per_node)
    nics_per_node = whole("nics_per_node", nics_per_node)
    if nodes == 1:
        return GroupLink(intra.latency, intra.bandwidth, 1, per_node, intra, nic, nics_per_node)
    across = min(per_node, nics_per_node) * nic.bandwidth
    return GroupLink(nic.latency, min(across, intra.bandwidth), nodes, per_node, intra, nic, nics_per_node)


def members_per_node(ranks, gpus_per_node: int) -> dict:
    """{node: how many of ``ranks`` live on it} (rank r lives on node r // gpus_per_node)."""
    counts: dict = {}
    for r in ranks:
        counts[r // gpus_per_node] = counts.get(r // gpus_per_node, 0) + 1
    return counts
