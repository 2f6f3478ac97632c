"""Seeds drawn at grading time, for every hidden check: reading a check's code gives no case it will run,
and each failure message names the seed, so the case can be replayed.
"""

from __future__ import annotations

import os
import random


def fresh_seed(nbytes: int = 6) -> int:
    """A seed from the operating system's entropy (``nbytes`` random bytes)."""
    return int.from_bytes(os.urandom(nbytes), "little")


def fresh_rng() -> random.Random:
    return random.Random(fresh_seed(8))
