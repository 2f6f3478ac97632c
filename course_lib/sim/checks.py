"""Argument checks every public function of the simulator shares, so bad input is a clear ValueError.

Each check names the argument, shows the value it got and says what kind of value to pass instead.
"""

from __future__ import annotations

import math
from numbers import Integral, Real


def whole(name: str, value, minimum: int = 1, hint: str = "") -> int:
    """``value`` as an int when it is a whole number >= ``minimum`` (numpy integers too, never bools)."""
    # bool is an Integral, but dp=True is always a slip, never a degree of parallelism.
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        raise ValueError(f"{name} must be a whole number >= {minimum}, got {value!r}{hint}")
    return int(value)


def amount(name: str, value, positive: bool = False, finite: bool = True, unit: str = "") -> float:
    """``value`` as a float when it is a real number >= 0 (> 0 with ``positive``), never NaN.

    ``finite=False`` lets infinity through where it means something (an ideal link's bandwidth)."""
    what = (f"a {'finite ' if finite else ''}number {'> 0' if positive else '>= 0'}"
            f"{(' ' + unit) if unit else ''}{'' if finite else ' (infinity allowed)'}")
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name} must be {what}, got {value!r} ({type(value).__name__})")
    value = float(value)
    # NaN fails every comparison, so `not value >= 0` catches it where `value < 0` would let it through.
    if not value >= 0 or (positive and value == 0) or (finite and math.isinf(value)):
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return value


def one_of(name: str, value, options) -> str:
    """``value`` when it is one of the names in ``options``."""
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"{name} must be one of {', '.join(options)}, got {value!r}")
    return value
