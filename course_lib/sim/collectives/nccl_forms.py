"""The collectives as NCCL (and torch's ProcessGroupNCCL) run them, in closed form: the pipelined double
binary tree, the pipelined ring of broadcast and reduce, and the pairwise exchange of all-to-all.

``collective_time(..., algorithm="nccl")`` picks the fastest of these and the ring for each op (cost.py).
"""

from __future__ import annotations

import math

from ..network.group_links import GroupLink


def double_binary_tree(s: float, n: int, link) -> float:
    """NCCL's all-reduce tree: pipelined, so a segment's latency adds up hop by hop on the way up and
    down, and the bytes stream at the link's rate: 2 x depth + 2S/B.

    Two binary trees each carry half the buffer, a rank being a leaf in one and inside the other, so
    every rank sends and receives 2S in all (NCCL's tuning model: tree algbw = busbw / 2; Sanders et
    al. 2009 for the two trees). NCCL chains the GPUs of a node and builds the trees across nodes:
    depth (per_node - 1) NVLink hops + ceil(log2 nodes) network hops (src/graph/tuning.cc); with a
    plain Link the tree spans all n ranks, ceil(log2 n) hops deep. The same tuning model gives the tree
    all-reduce 92% of the bus bandwidth it gives the ring (``busBw*.92`` for NCCL_ALGO_TREE,
    https://github.com/NVIDIA/nccl/blob/master/src/graph/tuning.cc): ``TREE_BANDWIDTH_SHARE``.
    """
    if isinstance(link, GroupLink):
        depth = ((link.per_node - 1) * link.intra.latency
                 + math.ceil(math.log2(link.nodes)) * link.nic.latency)
    else:
        depth = math.ceil(math.log2(n)) * link.latency
    return 2 * depth + 2 * s / (TREE_BANDWIDTH_SHARE * link.bandwidth)


TREE_BANDWIDTH_SHARE = 0.92


def pipelined_ring(s: float, n: int, link) -> float:
    """NCCL's broadcast and reduce: the buffer cut into many small chunks that follow one another round
    the ring (a chain from the root), so every link carries S once while the chunks ahead are forwarded:
    the latency of the n - 1 hops, then S/B. NCCL's tuning model counts nRanks steps for them and a bus
    bandwidth equal to the algorithm bandwidth (src/graph/tuning.cc; nccl-tests doc/PERFORMANCE.md,
    broadcast and reduce: busbw = algbw)."""
    hops = link.ring_latency(n - 1) if isinstance(link, GroupLink) else (n - 1) * link.latency
    return hops + s / link.bandwidth


def pairwise_all_to_all(s: float, n: int, link) -> float:
    """Every rank sends S/n to each of the n-1 others at once (NCCL posts them as one group of sends and
    receives): one latency of the slowest hop, then the bytes. On a group spanning nodes, the share for its
    own node's other members crosses NVLink while the rest leaves through the rank's own NIC, both at once
    (on a rail-optimised cluster each GPU has its NIC; DeepSeek-V3 overlaps the two, arXiv 2412.19437,
    section 3.2.2). The node with the fewest members bounds it: it sends the most across nodes.

    Scatter and gather run the same way from (to) the root (torch's ProcessGroupNCCL sends each share with
    ncclSend in one group, torch/csrc/cuda/nccl.cpp): the root's S/n to each other rank, same cost."""
    if not (isinstance(link, GroupLink) and link.spans_nodes):
        return link.latency + (n - 1) / n * s / link.bandwidth
    inside = s * (link.per_node - 1) / n / link.intra.bandwidth
    across = s * (n - link.per_node) / n / link.rail().bandwidth
    return link.nic.latency + max(inside, across)
