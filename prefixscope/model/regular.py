"""Opening a file for reading only when it is a regular file.

A path found by a directory walk, a cache entry or a lock file can be replaced by a FIFO or
a device before it is opened; a plain ``open`` of a FIFO without a writer waits forever,
and a device can stream forever. Every reader that opens a path it did not just create
goes through `open_regular`, which opens without blocking and checks what it opened.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO


def open_regular(path: Path | str, *, follow_symlinks: bool = True,
                 buffering: int = -1) -> BinaryIO:
    """`path` opened for binary reading if it is a regular file (after symbolic links, or,
    with ``follow_symlinks=False``, refusing a link), with `buffering` as `open` takes it
    (-1: the default buffer). Raises OSError (``not a regular file``, or the open's own
    error) otherwise."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    # O_NONBLOCK: opening a FIFO without a writer returns at once instead of waiting; the
    # descriptor is set back to blocking once it is known to be a regular file.
    fd = os.open(path, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=buffering)
    except BaseException:
        os.close(fd)
        raise
