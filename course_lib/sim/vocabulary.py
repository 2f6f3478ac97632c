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
ALGORITHMS = ("ring", "tree", "recursive_doubling", "parameter_server", "double_binary_tree",
              "hierarchical", "pairwise")
ALGORITHM_OPS = {"double_binary_tree": ("all_reduce",),
                 "hierarchical": ("all_reduce", "reduce_scatter", "all_gather"),
                 "pairwise": ("all_to_all",)}
SEGMENTED_OPS = ("all_reduce", "reduce_scatter", "all_gather")   # what gloo's ring cuts into segments

PIPELINE_SCHEDULES = ("gpipe", "1f1b", "interleaved_1f1b")
PIPELINE_PLACEMENTS = ("loop", "v")     # where a stage's chunks sit in the model (schedules.py)
RECOMPUTE = ("none", "selective", "full")
EVENT_KINDS = ("compute", "comm", "idle")
# How context parallelism moves keys and values (chapter 10): all-gathered before the attention (Llama 3),
# passed round a ring while each rank merges partial results (Liu et al. 2023), or all-to-all from
# sequence-sharded to head-sharded and back (DeepSpeed-Ulysses, Jacobs et al. 2023).
CP_METHODS = ("all_gather", "ring", "ulysses")
# Which tokens a rank holds: one contiguous chunk, or chunks r and 2N-1-r of 2N (zig-zag, for causal balance).
CP_LAYOUTS = ("contiguous", "zigzag")
