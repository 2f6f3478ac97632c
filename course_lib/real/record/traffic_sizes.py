"""How many bytes a recorded communication call moves, read from its arguments (record_traffic's sizes).

Conventions follow nccl-tests (see TrafficEvent); an all-to-all also says how many bytes went to each rank.
"""

from __future__ import annotations

import pickle

import torch.distributed as dist


def tensor_bytes(value) -> int:
    if hasattr(value, "element_size") and hasattr(value, "numel"):
        return value.element_size() * value.numel()
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(item) for item in value)
    return 0


def object_bytes(objects) -> int:
    try:
        return sum(len(pickle.dumps(item)) for item in objects or ())
    except Exception:  # noqa: BLE001 - a size estimate must never break the student's call
        return 0


def call_bytes(op: str, args: tuple, kwargs: dict) -> int:
    def argument(index: int, name: str):
        return kwargs[name] if name in kwargs else (args[index] if len(args) > index else None)

    if op in ("all_gather", "gather"):
        gathered = argument(0, "tensor_list") if op == "all_gather" else argument(1, "gather_list")
        return tensor_bytes(gathered) or tensor_bytes(argument(0 if op == "gather" else 1, "tensor"))
    if op in ("all_gather_into_tensor", "all_to_all_single"):
        return tensor_bytes(argument(0, "output_tensor" if op != "all_to_all_single" else "output"))
    if op in ("reduce_scatter", "scatter"):
        return tensor_bytes(argument(1, "input_list" if op == "reduce_scatter" else "scatter_list"))
    if op in ("reduce_scatter_tensor",):
        return tensor_bytes(argument(1, "input"))
    if op == "all_to_all":
        return tensor_bytes(argument(1, "input_tensor_list"))
    if op.endswith("_object_list") or op.endswith("_object"):
        return object_bytes(argument(0, "object_list") if "list" in op else [argument(0, "obj")])
    if op == "barrier" or op == "monitored_barrier":
        return 0
    return tensor_bytes(argument(0, "tensor"))


def bytes_sent_to(op: str, args: tuple, kwargs: dict, group=None) -> tuple[int, ...] | None:
    """Bytes an all-to-all sends to each rank: the input's rows cut by its split sizes (equal without).

    The functions and the ProcessGroup methods both take (output, input, output_splits, input_splits);
    ``group`` is the method's ProcessGroup, None for the functions (which may name theirs)."""
    def argument(index: int, name: str):
        return kwargs[name] if name in kwargs else (args[index] if len(args) > index else None)

    try:
        if op == "all_to_all":
            return tuple(tensor_bytes(t) for t in argument(1, "input_tensor_list"))
        if op != "all_to_all_single":
            return None
        source, splits = argument(1, "input"), argument(3, "input_split_sizes")
        world = group.size() if group is not None else dist.get_world_size(argument(4, "group"))
        rows = source.shape[0] if source.dim() else 1
        row_bytes = tensor_bytes(source) // rows if rows else 0
        splits = list(splits) if splits else [rows // world] * world
        return tuple(int(n) * row_bytes for n in splits)
    except Exception:  # noqa: BLE001 - a record must never break the student's call
        return None
