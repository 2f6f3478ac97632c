"""Copying one inbound submission out of nbgrader's exchange, as root, without trusting what is in it.

The inbound folder is the student's: whatever it holds, the student put there. nbgrader's own collect copies
it with ``shutil.copytree``, which follows symbolic links, so a link to a root-only file, to
``/proc/self/environ`` or to ``/dev/zero`` was copied (or read without end) by the instructor's root
process. Here only regular files and folders owned by the submitting student's uid are copied, each opened
relative to its already-opened folder with ``O_NOFOLLOW`` and checked again once open (a link swapped in
after the check is not followed); links, fifos, sockets and devices are refused, as are files beyond the
size and count limits. Every refusal is returned as a line naming the file and why, for the log.
"""

from __future__ import annotations

import fnmatch
import os
import pwd
import stat
from dataclasses import dataclass, field

READ_CHUNK = 1 << 20
MAX_DEPTH = 16            # folders within folders: deeper is refused (and a recursion is bounded)
SHOWN_NAME = 120          # a student's file name is shown as repr(), cut to this many characters

_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY   # a fifo swapped in never blocks
_OPEN_FOLDER = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY


@dataclass(frozen=True)
class CopyLimits:
    max_files: int = 1000                 # files and folders copied from one submission
    max_bytes: int = 100_000_000          # all files of one submission together
    max_file_bytes: int = 100_000_000     # one file
    excluded: tuple[str, ...] = ()        # globs of names never collected (CourseDirectory.ignore)
    included: tuple[str, ...] = ()        # if given, only files matching one (CourseDirectory.include)


@dataclass
class CopyResult:
    files: int = 0
    bytes: int = 0
    refused: list[str] = field(default_factory=list)   # "'<path>': <why>", one per refused thing


def shown(name: str) -> str:
    """A name the student chose, safe to print: quoted, escaped and cut short."""
    text = repr(name)
    return text if len(text) <= SHOWN_NAME else text[:SHOWN_NAME] + "...'"


def owner_name(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _kind(mode: int) -> str:
    for test, kind in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a fifo"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return "not a regular file"


class _Copy:
    def __init__(self, uid: int, limits: CopyLimits):
        self.uid, self.limits, self.result = uid, limits, CopyResult()

    def refuse(self, relative: str, why: str) -> None:
        self.result.refused.append(f"{shown(relative)}: {why}")

    def folder(self, folder_fd: int, dest: str, relative: str, depth: int) -> None:
        for name in sorted(os.listdir(folder_fd)):
            path = os.path.join(relative, name)
            if any(fnmatch.fnmatch(name, glob) for glob in self.limits.excluded):
                continue
            if self.result.files >= self.limits.max_files:
                self.refuse(path, f"more than {self.limits.max_files} files: this one and the rest are "
                                  "not collected")
                return
            try:
                self.entry(folder_fd, name, dest, path, depth)
            except OSError as error:   # unreadable, or changed under us: refused, the copy goes on
                self.refuse(path, f"could not be read safely ({type(error).__name__}: {error.strerror})")

    def entry(self, folder_fd: int, name: str, dest: str, path: str, depth: int) -> None:
        seen = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
        if not (stat.S_ISDIR(seen.st_mode) or stat.S_ISREG(seen.st_mode)):
            target = ""
            if stat.S_ISLNK(seen.st_mode):
                target = f" to {shown(os.readlink(name, dir_fd=folder_fd))}"
            self.refuse(path, f"{_kind(seen.st_mode)}{target}: only regular files are collected")
        elif seen.st_uid != self.uid:
            self.refuse(path, f"belongs to {owner_name(seen.st_uid)}, not to the submitting student")
        elif stat.S_ISDIR(seen.st_mode):
            if depth >= MAX_DEPTH:
                self.refuse(path, f"folders nested deeper than {MAX_DEPTH}: not collected")
                return
            fd = os.open(name, _OPEN_FOLDER, dir_fd=folder_fd)
            try:
                if self.opened_as_seen(fd, seen, path):
                    os.mkdir(os.path.join(dest, name), 0o755)
                    self.result.files += 1
                    self.folder(fd, os.path.join(dest, name), path, depth + 1)
            finally:
                os.close(fd)
        elif self.limits.included and not any(fnmatch.fnmatch(name, g) for g in self.limits.included):
            return
        elif seen.st_size > self.limits.max_file_bytes:
            self.refuse(path, f"{seen.st_size} bytes, over the {self.limits.max_file_bytes} a file may have")
        elif self.result.bytes + seen.st_size > self.limits.max_bytes:
            self.refuse(path, f"the submission would exceed {self.limits.max_bytes} bytes: not collected")
        else:
            self.file(folder_fd, name, seen, os.path.join(dest, name), path)

    def opened_as_seen(self, fd: int, seen: os.stat_result, path: str) -> bool:
        """What was opened is what was checked (not swapped for another file since)."""
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino, now.st_uid) != (seen.st_dev, seen.st_ino, self.uid) or \
                stat.S_IFMT(now.st_mode) != stat.S_IFMT(seen.st_mode):
            self.refuse(path, "changed while it was being collected: not collected")
            return False
        return True

    def file(self, folder_fd: int, name: str, seen: os.stat_result, dest: str, path: str) -> None:
        fd = os.open(name, _OPEN_FILE, dir_fd=folder_fd)
        try:
            if not self.opened_as_seen(fd, seen, path):
                return
            allowed = min(self.limits.max_file_bytes, self.limits.max_bytes - self.result.bytes)
            chunks, size = [], 0
            while size <= allowed:
                chunk = os.read(fd, min(READ_CHUNK, allowed + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        finally:
            os.close(fd)
        if size > allowed:
            self.refuse(path, "grew past the size limit while it was being read: not collected")
            return
        out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(out, "wb") as handle:
            handle.write(b"".join(chunks))
        os.utime(dest, ns=(seen.st_atime_ns, seen.st_mtime_ns))
        self.result.files += 1
        self.result.bytes += size


def copy_owned_files(src: str, dest: str, uid: int, limits: CopyLimits) -> CopyResult:
    """Copy the regular files and folders under ``src`` that belong to ``uid`` into a new folder ``dest``;
    everything else is refused (``CopyResult.refused``). Raises ``PermissionError`` when ``src`` itself is
    not a folder of ``uid`` (nothing is copied then)."""
    fd = os.open(src, _OPEN_FOLDER)
    try:
        top = os.fstat(fd)
        if top.st_uid != uid:
            raise PermissionError(f"{shown(src)} belongs to {owner_name(top.st_uid)}, not uid {uid}")
        os.mkdir(dest, 0o755)
        copy = _Copy(uid, limits)
        copy.folder(fd, dest, "", 0)
        return copy.result
    finally:
        os.close(fd)
