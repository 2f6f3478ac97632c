"""Plain-data transport between processes that must not trust each other (a grader and student code).

``encode`` writes numbers, strings, bytes, containers and tensors with ``torch.save``; ``decode`` reads
them back with torch's weights-only loader, which refuses anything that would run code on loading
(a crafted pickle's ``__reduce__``), and maps every tensor to the CPU so the reader never starts CUDA.
"""

from __future__ import annotations

import io


def encode(value) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def decode(payload: bytes):
    """The value ``encode`` wrote; raises (``pickle.UnpicklingError`` and others) on anything else."""
    import torch

    return torch.load(io.BytesIO(payload), weights_only=True, map_location="cpu")
