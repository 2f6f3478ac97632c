"""PyTorch's own implementations of what the chapters build, run on CPU ranks and read: the zero-bubble
pipeline schedules of ``torch.distributed.pipelining`` (``torch_pipelines``), the context-parallel ring of
``torch.distributed.tensor.experimental`` (``torch_context_parallel``), and a DCP checkpoint's whole
state gathered to compare (``sharded_state``). May import every room before it in the package's list.
"""
