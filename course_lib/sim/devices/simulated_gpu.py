"""The seed repository's simulated GPU (compute / send / receive), on a virtual clock instead of sleeping.

GPUs that talk share one ``SimulatedNetwork``; ``simulated_gpus(n)`` makes n of them. A GPU made on its
own (one per process, as the seed's examples make them) receives by paying the receive latency alone.
"""

from __future__ import annotations

from collections import defaultdict, deque

from ..checks import amount, whole
from ..timeline import Timeline, span

# The seed's constants (its gpu.py): seconds per unit of compute, per message, per unit of data.
SECONDS_PER_COMPUTE_UNIT = 0.1
NETWORK_BASE_LATENCY_SECONDS = 0.05
SECONDS_PER_DATA_UNIT = 0.01


class SimulatedNetwork:
    """Mailboxes between simulated GPUs, and the events they recorded (one lane per rank)."""

    def __init__(self):
        self.mailboxes: dict[tuple[int, int], deque] = defaultdict(deque)
        self.events: dict[int, list] = defaultdict(list)

    def timeline(self, title: str = "simulated GPUs") -> Timeline:
        ranks = sorted(self.events)
        names = [f"rank {r}" for r in ranks]
        return Timeline(names, [self.events[r] for r in ranks], title=title)


class SimulatedGPU:
    """One device of the seed: ``.compute``, ``.send``, ``.receive`` advance ``.now`` (virtual seconds)."""

    SECONDS_PER_COMPUTE_UNIT = SECONDS_PER_COMPUTE_UNIT
    NETWORK_BASE_LATENCY_SECONDS = NETWORK_BASE_LATENCY_SECONDS
    SECONDS_PER_DATA_UNIT = SECONDS_PER_DATA_UNIT

    def __init__(self, rank: int, network: SimulatedNetwork | None = None,
                 seconds_per_compute_unit: float = SECONDS_PER_COMPUTE_UNIT,
                 network_base_latency_seconds: float = NETWORK_BASE_LATENCY_SECONDS,
                 seconds_per_data_unit: float = SECONDS_PER_DATA_UNIT):
        for name, value in (("seconds_per_compute_unit", seconds_per_compute_unit),
                            ("network_base_latency_seconds", network_base_latency_seconds),
                            ("seconds_per_data_unit", seconds_per_data_unit)):
            amount(name, value, unit="seconds")
        rank = whole("rank", rank, 0)
        self.rank = rank
        self.global_rank = rank
        # On its own, the seed's GPU cannot see its peers' sends: receive only pays its own latency.
        self.alone = network is None
        self.network = network if network is not None else SimulatedNetwork()
        self.seconds_per_compute_unit = seconds_per_compute_unit
        self.network_base_latency_seconds = network_base_latency_seconds
        self.seconds_per_data_unit = seconds_per_data_unit
        self.now = 0.0
        self._events = self.network.events[rank]

    def _advance(self, seconds: float, kind: str, label: str) -> float:
        start, self.now = self.now, self.now + seconds
        self._events.append(span(start, self.now, kind, label))
        return seconds

    def compute(self, description: str, compute_units: float) -> float:
        """Work for compute_units x SECONDS_PER_COMPUTE_UNIT seconds; returns the seconds spent."""
        compute_units = amount("compute_units", compute_units)
        return self._advance(compute_units * self.seconds_per_compute_unit, "compute", description)

    def send(self, target_rank: int, description: str, data_size_units: float) -> float:
        """Send: latency + units x SECONDS_PER_DATA_UNIT; the message arrives when the send ends."""
        data_size_units = amount("data_size_units", data_size_units)
        target_rank = whole("target_rank", target_rank, 0)
        if target_rank == self.rank:
            raise ValueError(f"rank {self.rank} cannot send to itself; pick another target_rank")
        seconds = self.network_base_latency_seconds + data_size_units * self.seconds_per_data_unit
        self._advance(seconds, "comm", f"send {description} -> {target_rank}")
        self.network.mailboxes[(self.rank, target_rank)].append((self.now, data_size_units, description))
        return seconds

    def receive(self, source_rank: int, description: str, data_size_units: float) -> float:
        """Wait (idle) until the matching message has arrived, then pay the receive latency.

        A GPU made on its own (no shared network) pays the receive latency alone, as the seed's does."""
        data_size_units = amount("data_size_units", data_size_units)
        source_rank = whole("source_rank", source_rank, 0)
        if source_rank == self.rank:
            raise ValueError(f"rank {self.rank} cannot receive from itself; pick another source_rank")
        box = self.network.mailboxes[(source_rank, self.rank)]
        if self.alone and not box:
            return self._advance(self.network_base_latency_seconds, "comm",
                                 f"recv {description} <- {source_rank}")
        if not box:
            raise RuntimeError(
                f"rank {self.rank} receives {description!r} from rank {source_rank}, but rank "
                f"{source_rank} has not sent it yet: call gpus[{source_rank}].send({self.rank}, ...) first. "
                "On the virtual clock calls may run in any order, but a send must precede its receive.")
        arrival, units, _ = box.popleft()
        if units != data_size_units:
            raise ValueError(f"rank {self.rank} expects {data_size_units} units from rank {source_rank} "
                             f"but {units} were sent; make the sizes match")
        start = self.now
        if arrival > self.now:
            self._advance(arrival - self.now, "idle", f"wait for {description} <- {source_rank}")
        self._advance(self.network_base_latency_seconds, "comm", f"recv {description} <- {source_rank}")
        return self.now - start


def simulated_gpus(world_size: int, **constants) -> list[SimulatedGPU]:
    """``world_size`` SimulatedGPUs sharing one network (constants as keyword arguments)."""
    world_size = whole("world_size", world_size, hint=" (how many simulated GPUs)")
    network = SimulatedNetwork()
    return [SimulatedGPU(r, network, **constants) for r in range(world_size)]
