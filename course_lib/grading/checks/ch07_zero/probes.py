"""What chapter 07's checks hand the student's code: memory probes, hooks on the check's model, a closure.

These run *inside* the student's code (a module hook fires in the student's forward, a closure in the
student's step()), so the exercise's Refusal lists this file as allowed; nothing here computes an answer.
``LiveTensorBytes`` measures what a process really holds: every tensor storage created while it is on
and still alive, at its current size (a storage freed with ``resize_(0)`` counts 0; one that autograd
keeps for the backward counts in full), as torch's own allocator statistics would on a GPU.
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveTensorBytes(TorchDispatchMode):
    """``with LiveTensorBytes() as probe:`` ... ``probe.live()``: bytes of the storages made inside and
    still alive (whoever holds them: a module, a closure, a tensor's .grad, autograd's saved tensors).
    Storages made before (a model built outside) count only if an op inside makes a new one."""

    def __init__(self):
        super().__init__()
        self._storages: dict[int, weakref.ref] = {}
        self.points: dict[str, list[int]] = {"forward": [], "backward": []}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {value.untyped_storage()._cdata for value in tree_flatten((args, kwargs))[0]
                  if isinstance(value, torch.Tensor)}
        for value in tree_flatten(out)[0]:   # a view or an in-place result is its input's memory
            if isinstance(value, torch.Tensor) and value.untyped_storage()._cdata not in inputs:
                self._track(value.untyped_storage())
        return out

    def _track(self, storage) -> None:
        key = storage._cdata
        if key not in self._storages:
            self._storages[key] = weakref.ref(storage, lambda _, key=key: self._storages.pop(key, None))

    def live(self) -> int:
        return sum(storage.nbytes() for ref in list(self._storages.values())
                   if (storage := ref()) is not None)

    def measure(self, phase: str) -> None:
        self.points[phase].append(self.live())

    def peaks(self) -> dict[str, int]:
        return {phase: max(points, default=0) for phase, points in self.points.items()}


def measure_at_every_layer(leaves, probe: LiveTensorBytes) -> None:
    """Measure at each leaf's forward and, through its input's gradient, during its backward."""
    def on_forward(module, args, output):
        probe.measure("forward")
        if args and isinstance(args[0], torch.Tensor) and args[0].requires_grad:
            args[0].register_hook(lambda grad: probe.measure("backward") or grad)

    for leaf in leaves:
        leaf.register_forward_hook(on_forward)


def watch_tie(first, second, ties: list) -> None:
    """Per forward of ``second``: does it see the same weight as ``first`` (one parameter, two modules)?"""
    second.register_forward_hook(lambda *_: ties.append(
        second.weight is first.weight or torch.equal(second.weight, first.weight)))


def drop_gradients_at_once(model) -> None:
    """A plain model whose parameters' gradients are dropped as soon as they are made: what it then holds
    at its peak is its activations, the baseline the FSDP memory check adds a unit and the shards to."""
    for parameter in model.parameters():
        if parameter.requires_grad:
            parameter.register_post_accumulate_grad_hook(lambda p: setattr(p, "grad", None))


def closure_of(compute_loss):
    """A closure for ``optimizer.step(closure)``: ``compute_loss()`` (the check's zero_grad, forward,
    backward and gradient averaging), as torch's optimizers expect one; it notes each loss it computed and
    whether gradients were on when the optimizer called it (torch's optimizers switch them on)."""
    calls: list[bool] = []
    losses: list = []

    def closure():
        calls.append(torch.is_grad_enabled())
        if not calls[-1]:
            raise RuntimeError("step(closure) called the closure with gradients off: a closure runs a "
                               "backward, so call it inside `with torch.enable_grad():`, as torch's "
                               "optimizers do")
        losses.append(compute_loss())
        return losses[-1]

    closure.calls, closure.losses = calls, losses
    return closure
