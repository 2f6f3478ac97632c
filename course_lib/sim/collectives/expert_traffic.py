"""What one expert-parallel all-to-all (dispatch or combine) sends per rank, and how long it takes.

A rank holds ``tokens`` tokens, each sent to ``k`` experts spread evenly over the ``ep`` ranks of its
expert-parallel group (balanced routing: every expert equally likely). Plain dispatch sends a row per
(token, expert) pair; DeepSeek-V3's node-limited dispatch (arXiv 2412.19437, section 3.2.2) sends each token
at most once to each of at most ``node_limit`` nodes over InfiniBand, to the GPU with its own in-node index,
which forwards it over NVLink to the GPUs holding its experts there.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..checks import amount, whole
from ..network.group_links import GroupLink
from .cost import check_link, pairwise_all_to_all


@dataclass(frozen=True)
class ExpertTraffic:
    """Bytes one rank sends in one all-to-all: over NVLink to its node, over its NIC to other nodes."""

    nvlink_bytes: float
    nic_bytes: float

    @property
    def total(self) -> float:
        return self.nvlink_bytes + self.nic_bytes


def _layout(link, ep: int) -> tuple[int, int]:
    """(nodes, ranks per node) of the group; a plain Link is one node."""
    if isinstance(link, GroupLink) and link.spans_nodes:
        return link.nodes, link.per_node
    return 1, ep


def expert_traffic(tokens: float, hidden: int, k: int, ep: int, link, node_limit: int | None = None,
                   bytes_per_element: float = 2) -> ExpertTraffic:
    """Expected bytes a rank sends in one dispatch of ``tokens`` tokens to their ``k`` experts.

    Plain: each pair leaves the rank with probability (ep-1)/ep, crossing nodes with (ep-per_node)/ep.
    Node-limited to M nodes: M (nodes-1)/nodes copies per token cross nodes (its own node is among the M
    with probability M/nodes), and k (per_node-1)/per_node copies per token are forwarded over NVLink (the
    expert's GPU is the entry GPU with probability 1/per_node).
    """
    tokens = amount("tokens", tokens, unit="tokens per rank")
    whole("hidden", hidden)
    whole("k", k, hint=" (experts per token)")
    ep = whole("ep", ep, hint=" (ranks of the expert-parallel group)")
    check_link(link)
    row = hidden * amount("bytes_per_element", bytes_per_element, positive=True, unit="bytes")
    nodes, per_node = _layout(link, ep)
    if node_limit is None:
        return ExpertTraffic(tokens * k * (per_node - 1) / ep * row, tokens * k * (ep - per_node) / ep * row)
    limit = min(whole("node_limit", node_limit, hint=" (nodes a token may reach)"), nodes)
    across = limit * (nodes - 1) / nodes
    return ExpertTraffic(tokens * k * (per_node - 1) / per_node * row, tokens * across * row)


def expert_all_to_all_time(tokens: float, hidden: int, k: int, ep: int, link, node_limit: int | None = None,
                           bytes_per_element: float = 2) -> float:
    """Seconds of one dispatch (or combine, the same rows back): NVLink and NIC work at once.

    Without a node limit this is ``collective_time("all_to_all", tokens*k*row, ep, link, "pairwise")``.
    """
    traffic = expert_traffic(tokens, hidden, k, ep, link, node_limit, bytes_per_element)
    if ep == 1 or traffic.total == 0:
        return 0.0
    if node_limit is None:
        return pairwise_all_to_all(tokens * k * hidden * bytes_per_element, ep, link)
    if not (isinstance(link, GroupLink) and link.spans_nodes):
        return link.latency + traffic.total / link.bandwidth
    return link.nic.latency + max(traffic.nvlink_bytes / link.intra.bandwidth,
                                  traffic.nic_bytes / link.rail().bandwidth)
