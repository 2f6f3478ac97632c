"""Relaying a rank's output to the caller's own stdout/stderr, one ``[rank r]``-prefixed line at a time.

Printing happens in the thread that called run_ranks, so Jupyter shows it in the running cell.
"""

from __future__ import annotations

import sys


class Relay:
    """Prints one rank's stream line by line with its ``[rank r]`` prefix as the bytes arrive."""

    def __init__(self, rank: int, to_stderr: bool):
        self.rank, self.to_stderr, self.pending = rank, to_stderr, b""

    def feed(self, data: bytes) -> None:
        *lines, self.pending = (self.pending + data).split(b"\n")
        for line in lines:
            self._print(line)

    def close(self) -> None:
        if self.pending:
            self._print(self.pending)
            self.pending = b""

    def _print(self, line: bytes) -> None:
        stream = sys.stderr if self.to_stderr else sys.stdout
        print(f"[rank {self.rank}] {line.decode('utf-8', errors='replace')}", file=stream, flush=True)
