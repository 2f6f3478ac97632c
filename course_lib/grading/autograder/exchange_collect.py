"""``nbgrader collect`` that trusts nothing a student controls (nbgrader_config.py selects it).

Everything in the exchange's inbound folder was put there by students, and collect runs as root:

- **Who submitted.** An inbound entry is named ``<student>+<assignment>+<time>+<random>``, and any student
  can create one under any name. nbgrader only warns when an entry is not owned by the student it names,
  and still takes the latest per name: one student's forged entry replaced a classmate's real submission.
  Here an entry counts only when it is a real folder owned by the uid of the account the name gives; any
  other is refused and reported (with its owner: the instructor sees who tried) before the latest of each
  student's own entries is chosen.
- **What is copied.** Only regular files and folders owned by that student, never what a link points at,
  never a device or fifo, within size and count limits (``exchange_copy.copy_owned_files``); the rest is
  refused and reported with the student named.
- **When.** nbgrader takes a submission's time from the entry's name and its ``timestamp.txt``, both the
  student's. Here it is the latest status change (``st_ctime``) of the entry and of everything in it: the
  kernel sets it whenever a file is created, written or renamed, and no user can set it back. A student who
  changes a file after submitting makes the submission later, never earlier. That time is written to the
  collected ``timestamp.txt``, which ``make grade`` carries into the class gradebook (lateness).
"""

from __future__ import annotations

import glob
import os
import pwd
import stat
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.utils import check_mode, parse_utc
from traitlets import Integer

from .exchange_copy import CopyLimits, copy_owned_files, owner_name, shown
from .submissions import TIMESTAMP

TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f %Z"   # as grading/submitted/*/*/timestamp.txt is written for zips
MAX_WALKED = 100_000   # entries the submission time is read from (beyond them, the copy refuses anyway)


def last_changed(folder: str | Path, limit: int = MAX_WALKED) -> datetime:
    """The latest st_ctime of ``folder`` and everything below it (links not followed, at most ``limit``
    entries read), in UTC."""
    latest = os.lstat(folder).st_ctime
    walked = 0
    for parent, folders, files in os.walk(folder):
        for name in folders + files:
            try:
                latest = max(latest, os.lstat(os.path.join(parent, name)).st_ctime)
            except OSError:   # removed meanwhile by the student: it is not part of the submission
                pass
            walked += 1
            if walked >= limit:
                return datetime.fromtimestamp(latest, UTC)
    return datetime.fromtimestamp(latest, UTC)


def student_uid(student: str) -> int | None:
    """The uid of the account named ``student``, or None when there is none."""
    try:
        return pwd.getpwnam(student).pw_uid
    except (KeyError, UnicodeError, ValueError):
        return None


def entry_refusal(path: str, student: str) -> str | None:
    """Why the inbound entry ``path``, which names ``student``, is not that student's own (None: it is)."""
    try:
        seen = os.lstat(path)
    except OSError as error:   # removed meanwhile
        return f"it could not be read ({type(error).__name__})"
    uid = student_uid(student)
    if uid is None:
        return f"it names student {shown(student)}, who has no account on this machine"
    if not stat.S_ISDIR(seen.st_mode):
        return f"it is not a folder (owned by {owner_name(seen.st_uid)})"
    if seen.st_uid != uid:
        return (f"it names student {shown(student)} but belongs to {owner_name(seen.st_uid)}: a submission "
                f"in another student's name, not collected")
    return None


class TrustedCollect(ExchangeCollect):
    """nbgrader's collect, taking only each student's own entries and files, timed by the file system."""

    max_files = Integer(1000, help="Files and folders collected from one submission at most; the rest "
                                   "are refused and reported.").tag(config=True)

    def refused(self, what: str) -> None:
        self.log.error(f"REFUSED {what}")

    def _path_to_record(self, path):
        filename = os.path.basename(path)
        parts = filename.rsplit("+", 3)
        try:
            claimed = parse_utc(parts[2]) if len(parts) >= 3 else None
        except (ValueError, OverflowError, TypeError):   # a name the student made up: its time is no time
            claimed = None
        received = last_changed(path)
        if claimed is not None and abs((claimed.replace(tzinfo=UTC) - received).total_seconds()) > 60:
            self.log.warning(f"{shown(filename)}: its name says {claimed} but it last changed at "
                             f"{received:{TIME_FORMAT}}; the submission counts as received then")
        # nbgrader compares it with the gradebook's due date, a naive UTC time
        return {"username": parts[0], "filename": filename, "timestamp": received.replace(tzinfo=None)}

    def init_src(self):
        """As nbgrader 0.9's ``ExchangeCollect.init_src``, with every entry that is not the named student's
        own refused and reported before the latest of each student's entries is chosen."""
        if not self.coursedir.course_id:
            self.fail("No course id specified. Re-run with --course flag.")
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.inbound_path = os.path.join(self.course_path, "inbound")
        if not os.path.isdir(self.inbound_path):
            self.fail(f"Course not found: {self.inbound_path}")
        if not check_mode(self.inbound_path, read=True, execute=True):
            self.fail(f"You don't have read permissions for the directory: {self.inbound_path}")
        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
            try:
                self.duedate = gb.find_assignment(self.coursedir.assignment_id).duedate
            except MissingEntry:
                self.duedate = None
        student = self.coursedir.student_id or "*"
        pattern = os.path.join(glob.escape(self.inbound_path), f"{student}+{self.coursedir.assignment_id}+*")
        by_student = defaultdict(list)
        for path in sorted(glob.glob(pattern)):
            # refused before anything in it is read (a link to / would be walked for its time)
            why = entry_refusal(path, os.path.basename(path).rsplit("+", 3)[0])
            if why:
                self.refused(f"inbound entry {shown(os.path.basename(path))}: {why}")
                continue
            record = self._path_to_record(path)
            by_student[record["username"]].append(record)
        self.src_records = [self._choose(records) for records in by_student.values()]

    def _choose(self, records: list[dict]) -> dict:
        """The latest entry; with ``--before-duedate``, the latest one before the due date if there is one."""
        records = self._sort_by_timestamp(records)
        if self.duedate is not None and self.before_duedate:
            on_time = [r for r in records if r["timestamp"] <= self.duedate]
            return (on_time or records)[0]
        return records[0]

    def do_copy(self, src, dest):
        student = os.path.basename(src).rsplit("+", 3)[0]
        uid = student_uid(student)
        received = last_changed(src)
        coursedir = self.coursedir
        limits = CopyLimits(max_files=self.max_files, max_bytes=1000 * coursedir.max_dir_size,
                            max_file_bytes=1000 * coursedir.max_file_size, excluded=tuple(coursedir.ignore),
                            included=tuple(coursedir.include) if coursedir.include != ["*"] else ())
        try:
            result = copy_owned_files(src, dest, uid, limits)
        except OSError as error:   # the entry changed (hands, or into a link) since it was checked
            self.refused(f"submission {shown(os.path.basename(src))} of student {shown(student)}: {error}")
            return
        for what in result.refused:
            self.refused(f"in submission {shown(os.path.basename(src))} of student {shown(student)}: {what}")
        Path(dest, TIMESTAMP).write_text(received.strftime(TIME_FORMAT))

