"""`open_regular`: the one way prefixscope opens a path it did not just create."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from prefixscope.model.regular import open_regular


def test_a_regular_file_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"a": 1}\n' * 3)
    with open_regular(path) as fh:
        assert fh.read() == b'{"a": 1}\n' * 3


def test_a_fifo_without_a_writer_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "planted"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        open_regular(fifo)


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        open_regular(tmp_path)


def test_a_link_is_followed_unless_refused(tmp_path: Path) -> None:
    target = tmp_path / "owner"
    target.write_bytes(b"1234")
    link = tmp_path / "link"
    link.symlink_to(target)
    with open_regular(link) as fh:
        assert fh.read() == b"1234"
    with pytest.raises(OSError):
        open_regular(link, follow_symlinks=False)


def test_the_file_reads_blocking_after_the_check(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x")
    with open_regular(path) as fh:
        assert os.get_blocking(fh.fileno())
