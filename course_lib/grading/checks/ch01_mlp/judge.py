"""The student-facing side of chapter 01's hidden checks: a hand-written gradient against autograd's,
with a message naming which gradient is off, where, and its likely cause.
"""

from __future__ import annotations

import torch

# Float32 sums in a different order than autograd's differ by a few units in the last place.
RELATIVE_TOLERANCE, ABSOLUTE_TOLERANCE = 1e-4, 1e-6


def _shape(tensor: torch.Tensor) -> tuple[int, ...]:
    return tuple(tensor.shape)


def _hint(name: str, got: torch.Tensor, want: torch.Tensor) -> str:
    """A likely cause of the error, judged from its size and from how far into the backward pass it is."""
    scale = want.abs().max().item()
    for factor, cause in ((2.0, "twice too large: the mean runs over batch * outputs elements, y.numel()"),
                          (0.5, "half the right size: the derivative of r**2 is 2r, keep the 2"),
                          (-1.0, "of the wrong sign: the residual is prediction - target")):
        if scale > 0 and got.shape == want.shape and torch.allclose(got, factor * want, rtol=1e-3,
                                                                    atol=1e-6 * scale):
            return f" It is exactly {cause}."
    if name in ("W1", "b1", "x"):
        return (" Check the steps after the output layer: back through W2 to H, then through the ReLU"
                " (which entries does its derivative let through?), then the hidden layer's product.")
    return " Check dL/dY_hat first (the mean's 1/(batch * outputs) and the 2), then the product with H."


def compare_gradients(got: dict, want: dict, tensors: dict, case: str, names=None) -> float:
    """Raise AssertionError naming the first wrong gradient among ``names`` (default: every key of
    ``want``); return the largest error otherwise. ``tensors`` holds what each gradient is taken of."""
    names = tuple(want) if names is None else tuple(names)
    if not isinstance(got, dict):
        raise AssertionError(f"manual_backward must return a dict like {{'W1': ..., 'b1': ..., 'W2': ..., "
                             f"'b2': ..., 'x': ...}}, it returned {type(got).__name__} ({case})")
    missing = [name for name in names if name not in got]
    if missing:
        raise AssertionError(f"the gradients' dict has no {missing} key: it needs {sorted(want)} ({case})")
    largest_error = 0.0
    for name in names:
        value = got[name]
        if not isinstance(value, torch.Tensor):
            raise AssertionError(f"gradient {name!r} must be a torch.Tensor, got {type(value).__name__}"
                                 f" ({case})")
        if _shape(value) != _shape(tensors[name]):
            raise AssertionError(
                f"gradient of {name} has shape {_shape(value)} but {name} has shape {_shape(tensors[name])}:"
                f" dL/d{name} always has the shape of {name} (a missing transpose, or a sum over the wrong"
                f" dimension?) ({case})")
        value = value.detach().to(want[name].dtype)
        if not torch.isfinite(value).all():
            raise AssertionError(f"gradient of {name} contains nan or inf ({case})")
        error = (value - want[name]).abs()
        worst = int(error.argmax()) if error.numel() else 0
        if not torch.allclose(value, want[name], rtol=RELATIVE_TOLERANCE, atol=ABSOLUTE_TOLERANCE):
            index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), value.shape))
            raise AssertionError(
                f"gradient of {name} is wrong ({case}): max abs error {error.max().item():.3g} at index "
                f"{index}, where autograd gives {want[name].flatten()[worst].item():.6g} and yours is "
                f"{value.flatten()[worst].item():.6g}.{_hint(name, value, want[name])}")
        largest_error = max(largest_error, error.max().item() if error.numel() else 0.0)
    return largest_error
