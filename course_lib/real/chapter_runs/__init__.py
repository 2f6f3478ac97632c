"""One chapter's real workload run on ranks and timed with the harness: DDP steps and their buckets
(``ddp_step``, ``bucket_sweep``, chapter 03), a pipeline stage's forwards and backwards
(``stage_timing``, chapter 05), attention split over the sequence (``sequence_split``, chapter 10), and
an MoE layer's experts timed alone (``expert_timing``, chapter 11). May import every room above
``predict`` in the package's list.
"""
