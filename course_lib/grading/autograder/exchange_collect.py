"""``nbgrader collect`` with a submission time the student cannot set (nbgrader_config.py selects it).

nbgrader's own collect takes a submission's time from what the student's ``nbgrader submit`` wrote: the
inbound folder's name (``<student>+<assignment>+<time>+<random>``) and its ``timestamp.txt``. Both are
the student's files, in a folder the student owns, so a late submission could say it came early. The time
here is the latest status change (``st_ctime``) of the submitted folder and of everything in it: the
kernel sets it whenever a file is created, written or renamed, and no user can set it back. A student who
changes a file after submitting makes the submission later, never earlier.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from nbgrader.exchange.default.collect import ExchangeCollect

from .submissions import TIMESTAMP

TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f %Z"   # as grading/submitted/*/*/timestamp.txt is written for zips


def last_changed(folder: str | Path) -> datetime:
    """The latest st_ctime of ``folder`` and everything below it (links not followed), in UTC."""
    latest = os.lstat(folder).st_ctime
    for parent, folders, files in os.walk(folder):
        for name in folders + files:
            latest = max(latest, os.lstat(os.path.join(parent, name)).st_ctime)
    return datetime.fromtimestamp(latest, UTC)


class TrustedCollect(ExchangeCollect):
    """nbgrader's collect, with each submission's time read off the file system instead of its name."""

    def _path_to_record(self, path):
        record = super()._path_to_record(path)
        claimed, received = record["timestamp"], last_changed(path)
        if claimed is not None and abs((claimed.replace(tzinfo=UTC) - received).total_seconds()) > 60:
            self.log.warning(f"{record['filename']}: its name says {claimed} but it last changed at "
                             f"{received:{TIME_FORMAT}}; the submission counts as received then")
        # nbgrader compares it with the gradebook's due date, a naive UTC time
        record["timestamp"] = received.replace(tzinfo=None)
        return record

    def do_copy(self, src, dest):
        received = last_changed(src)
        super().do_copy(src, dest)
        Path(dest, TIMESTAMP).write_text(received.strftime(TIME_FORMAT))
