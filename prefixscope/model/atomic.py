"""Files prefixscope writes (reports, plots, Parquet exports) appear whole or not at all.

A report written in place and cut short -- the disk full, the run killed -- leaves a file
that looks like a report and is not (an HTML page without its end, a JUnit file a CI
reads as "no failures"). Every output is written to a temporary name in the same folder
and renamed onto its name once complete: a rename within one file system is atomic, so a
reader sees the old file or the new one. One helper, used by every writer.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary file beside `path` for the block to write; renamed onto `path` when the
    block ends, removed when it raises (`path` is then as it was).

    `path` naming something that is not a regular file (``/dev/stdout``, a FIFO) is
    written in place: there is nothing to replace. A symbolic link stays a link: the file
    it points to is replaced. The new file gets the old one's permissions, else the
    umask's.

    Raises:
        OSError: the folder cannot hold the temporary file, or the rename failed.
    """
    target = Path(os.path.realpath(path))
    try:
        mode: int | None = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        yield path
        return
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, stat.S_IMODE(mode) if mode is not None else 0o666 & ~_umask())
        with open(tmp, "rb") as fh:  # on disk before the name points at it
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with suppress(OSError):
            tmp.unlink()
        raise


def write_atomic(path: Path, data: str | bytes) -> None:
    """`data` (text as UTF-8, a lone surrogate from a log as U+FFFD) as the file `path`,
    atomically (`atomic_path`)."""
    raw = data.encode("utf-8", "replace") if isinstance(data, str) else data
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        fh.write(raw)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
