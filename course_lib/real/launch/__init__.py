"""Starting ranks: ``run_ranks`` forks ``fn(rank, world_size, *args)`` from a notebook cell (``runner``,
the parent's side in ``rank_group``, the child's in ``_child``, what a rank reports in ``rank_outcome``,
its output relayed by ``relay``, the errors a run raises in ``errors``), and ``torchrun`` runs the same
function under torchrun or srun. May import ``plumbing`` only: launching neither records nor measures.
"""
