"""Reading NCCL_DEBUG=INFO output: split a log into its lines' parts (host, process, thread, GPU, message).

NCCL prefixes every INFO/WARN line with ``host:pid:tid [cudaDev]``; ``read_excerpts`` reads a file of
published excerpts, each under a ``## source: <url>`` line, as chapter 09 stores them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

NCCL_LINE = re.compile(r"^(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<device>\d+)\] "
                       r"NCCL (?P<level>INFO|WARN|TRACE) (?P<message>.*)$")
RING = re.compile(r"^Channel (?P<channel>\d+)/(?P<channels>\d+) :(?P<ranks>(?:\s+\d+)+)\s*$")
CHANNEL = re.compile(r"Channel (?P<channel>\d+)(?:/\d+)? : (?P<src>\d+)\[\w+\] -> (?P<dst>\d+)\[\w+\]"
                     r"(?: \[(?P<direction>send|receive)\])? via (?P<transport>\S+)")


@dataclass(frozen=True)
class NcclLine:
    host: str
    pid: int
    tid: int
    device: int       # the CUDA device index the process uses ([cudaDev] in the prefix)
    level: str
    message: str

    def channel(self) -> dict | None:
        """For a "Channel NN : a[..] -> b[..] via T" line: channel, source and destination rank, transport."""
        match = CHANNEL.search(self.message)
        if match is None:
            return None
        found = match.groupdict()
        return {"channel": int(found["channel"]), "from_rank": int(found["src"]),
                "to_rank": int(found["dst"]),
                "direction": found["direction"], "transport": found["transport"]}


    def ring(self) -> dict | None:
        """For a "Channel NN/MM : r r r ..." line: the channel, how many channels, and its ring of ranks."""
        match = RING.match(self.message)
        if match is None:
            return None
        return {"channel": int(match["channel"]), "channels": int(match["channels"]),
                "ranks": [int(rank) for rank in match["ranks"].split()]}


def parse_line(text: str) -> NcclLine | None:
    """One log line's parts, or None for a line NCCL did not prefix (e.g. "NCCL version ...")."""
    match = NCCL_LINE.match(text.strip())
    if match is None:
        return None
    parts = match.groupdict()
    return NcclLine(parts["host"], int(parts["pid"]), int(parts["tid"]), int(parts["device"]), parts["level"],
                    parts["message"])


@dataclass
class Excerpt:
    source: str
    notes: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def read_excerpts(path) -> list[Excerpt]:
    """The excerpts of a log file: each starts at ``## source: <where it was published>``, then ``#`` notes,
    then the log's own lines."""
    excerpts: list[Excerpt] = []
    for raw in Path(path).read_text().splitlines():
        if raw.startswith("## source:"):
            excerpts.append(Excerpt(raw.removeprefix("## source:").strip()))
        elif not excerpts or not raw.strip():
            continue
        elif raw.startswith("#"):
            excerpts[-1].notes.append(raw.lstrip("# "))
        else:
            excerpts[-1].lines.append(raw)
    if not excerpts:
        raise ValueError(f"{path} holds no excerpt: each must start with a line '## source: <url>'")
    return excerpts
