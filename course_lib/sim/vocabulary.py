"""The names every layer of the simulator may read: collectives and their algorithms, pipeline schedules,
recompute policies and timeline event kinds. Each layer validates against these; none defines its own.
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
