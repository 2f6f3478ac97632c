"""The alpha-beta link: sending n bytes over it takes latency + n / bandwidth (Hockney's model).

Every cost the simulator computes is built from links: a preset names two (inside a node, across nodes).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..checks import amount


@dataclass(frozen=True)
class Link:
    """A point-to-point link in the alpha-beta model: sending n bytes takes latency + n / bandwidth."""

    latency: float = 5e-6       # seconds per message (alpha)
    bandwidth: float = 100e9    # bytes per second (1 / beta)

    def __post_init__(self):
        amount("Link latency", self.latency, unit="seconds")
        # Infinite bandwidth is the "what if the network were free" link; NaN would poison every time.
        amount("Link bandwidth", self.bandwidth, positive=True, finite=False, unit="bytes/s")

    def transfer_time(self, nbytes: float) -> float:
        return self.latency + amount("nbytes", nbytes, unit="bytes to send") / self.bandwidth
