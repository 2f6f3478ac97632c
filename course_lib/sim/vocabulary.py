"""The names every layer of the simulator may read: collectives and their algorithms, pipeline schedules,
recompute policies, timeline event kinds, context-parallel methods. Each layer validates against these;
none defines its own.
"""

OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "scatter", "gather",
       "all_to_all")
# ring, tree, recursive_doubling and parameter_server are the textbook forms: every step sends whole
# messages and waits for them (store-and-forward). double_binary_tree is the tree as NCCL runs it
# (pipelined, two trees each carrying half); hierarchical reduces inside nodes before crossing them.
# pairwise is the all-to-all as NCCL and gloo run it: every rank sends each other rank its share directly,
# all at once, over NVLink to its node and its own NIC to the others.
# pipelined_ring is NCCL's broadcast and reduce: the buffer cut into many chunks that follow each other
# round the ring, so it costs about S/B plus one latency per hop. nccl (the default) is what NCCL's tuner
# does: the fastest, under the same cost model, of the algorithms NCCL has for the op (NCCL_CHOICES).
ALGORITHMS = ("nccl", "ring", "tree", "recursive_doubling", "parameter_server", "double_binary_tree",
              "hierarchical", "pairwise", "pipelined_ring")
ALGORITHM_OPS = {"double_binary_tree": ("all_reduce",),
                 "hierarchical": ("all_reduce", "reduce_scatter", "all_gather"),
                 "pairwise": ("all_to_all", "scatter", "gather"),
                 "pipelined_ring": ("broadcast", "reduce")}
# Which algorithms NCCL has for each op (NVIDIA/nccl src/graph/tuning.cc, ncclTopoTuneModel: broadcast and
# reduce run only NCCL_ALGO_RING; all-gather and reduce-scatter RING, PAT, NVLS, COLLNET_DIRECT; all-reduce
# every algorithm but PAT, TREE among them). NVLS and CollNet need NVLink SHARP or InfiniBand SHARP, and
# PAT one GPU per node: no preset models them, so the ring and the tree are what is left. NCCL has no
# all-to-all, scatter or gather collective: they are grouped sends and receives (torch's ProcessGroupNCCL,
# torch/csrc/cuda/nccl.cpp all2all and scatter), every share sent directly: pairwise.
NCCL_CHOICES = {"all_reduce": ("ring", "double_binary_tree"),
                "reduce_scatter": ("ring",), "all_gather": ("ring",),
                "broadcast": ("pipelined_ring",), "reduce": ("pipelined_ring",),
                "all_to_all": ("pairwise",), "scatter": ("pairwise",), "gather": ("pairwise",)}
SEGMENTED_OPS = ("all_reduce", "reduce_scatter", "all_gather")   # what gloo's ring cuts into segments

PIPELINE_SCHEDULES = ("gpipe", "1f1b", "interleaved_1f1b")
PIPELINE_PLACEMENTS = ("loop", "v")     # where a stage's chunks sit in the model (schedules.py)
RECOMPUTE = ("none", "selective", "full")
# How the attention core runs: fused (FlashAttention, Dao et al. 2022: the s x s scores stay on chip and are
# never stored, as every large run of the course's papers trained) or unfused (the scores, their softmax and
# dropout stored for the backward, as Korthikanti et al. 2022 count them).
ATTENTION = ("fused", "unfused")
EVENT_KINDS = ("compute", "comm", "idle")
# How context parallelism moves keys and values (chapter 10): all-gathered before the attention (Llama 3),
# passed round a ring while each rank merges partial results (Liu et al. 2023), or all-to-all from
# sequence-sharded to head-sharded and back (DeepSpeed-Ulysses, Jacobs et al. 2023).
CP_METHODS = ("all_gather", "ring", "ulysses")
# Which tokens a rank holds: one contiguous chunk, or chunks r and 2N-1-r of 2N (zig-zag, for causal balance).
CP_LAYOUTS = ("contiguous", "zigzag")
