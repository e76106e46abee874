"""Files the store layer makes beside the user's: a new store, built under a temporary name
and put in place whole by one process; temporary stores' folders, which a killed run must
not leave behind.

A new store (``ingest LOGS --store new.duckdb`` where there is none) is written to a hidden
file beside its name, ``.new.duckdb.<pid>-<start>-<random>.building``, and put in place with
``os.link`` (it fails when the name exists: no rename replaces what another process put
there), then the building name is unlinked. Two ingests creating one store at once both
build, one links first; the other is told so in one line and removes its own building file,
never the store: before, the loser's clean-up deleted the file the winner had just filled.
An empty file at the name (a ``touch``-ed placeholder) is replaced only by the process that
holds its ``flock`` and finds it still empty and still there. Where the file system has no
hard links, the name is taken with ``O_CREAT | O_EXCL`` and filled as a placeholder.

A temporary store (``report LOGS``) lives in a ``prefixscope-*`` folder of the system's
temporary directory holding ``owner.pid``: this process's id and start time. Closing the
store removes the folder; SIGTERM unwinds the command so it is removed too
(`cli.main`); after a SIGKILL, the next run that makes a temporary store removes every
such folder of this user whose owner is dead (its pid gone, or reused by a process that
started at another time). A folder without an owner file, or whose owner lives, is left
alone; so are building files of live processes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
import tempfile
from pathlib import Path

import duckdb

from prefixscope.model.regular import open_regular
from prefixscope.store.store import Store, StoreError, _disk_full

TEMPORARY_PREFIX = "prefixscope-"
OWNER_FILE = "owner.pid"
_BUILDING = ".building"
# link(2) fails with these where the file system has no hard links
_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK,
             errno.ENOSYS, errno.EACCES}


def _started(pid: int) -> str:
    """When process `pid` started (clock ticks since boot, /proc's field 22); "" where it
    cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return fields[19].decode()
    except (OSError, IndexError, UnicodeDecodeError):
        return ""


def owner_token() -> str:
    """This process, as a building file's name and an owner file hold it: pid-start."""
    pid = os.getpid()
    return f"{pid}-{_started(pid) or 0}"


def owner_dead(token: str) -> bool:
    """The process a `owner_token` names has ended (False when it cannot be told)."""
    pid_text, _, started = token.strip().partition("-")
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # OverflowError: no pid is that large
        return True
    except OSError:  # EPERM: alive, another user's
        return False
    now = _started(pid)
    return bool(started) and started != "0" and bool(now) and now != started


def _read_small(path: Path) -> str | None:
    """A small regular file's text, None for anything else (a FIFO planted there must not
    block the run)."""
    try:
        with open_regular(path, follow_symlinks=False) as fh:
            return fh.read(256).decode("ascii", "replace")
    except OSError:
        return None


# -- temporary stores ------------------------------------------------------------------


def temporary_folder() -> tempfile.TemporaryDirectory[str]:
    """A new ``prefixscope-*`` folder for a temporary store, marked with this process as its
    owner; the folders of dead owners are removed first (`sweep_temporary`)."""
    sweep_temporary()
    folder = tempfile.TemporaryDirectory(prefix=TEMPORARY_PREFIX)
    Path(folder.name, OWNER_FILE).write_text(owner_token() + "\n")
    return folder


def temporary_path() -> str:
    """`temporary_folder`'s folder made the same way (marked, dead owners' swept first),
    its path only: the caller removes it (a scratch folder whose owner object must not
    remove it from a forked worker, where `TemporaryDirectory`'s finalizer would)."""
    sweep_temporary()
    path = tempfile.mkdtemp(prefix=TEMPORARY_PREFIX)
    Path(path, OWNER_FILE).write_text(owner_token() + "\n")
    return path


def sweep_temporary(directory: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove the ``prefixscope-*`` folders of this user in `directory` (default: the
    system's temporary directory) whose owner process is dead; returns them."""
    base = Path(directory if directory is not None else tempfile.gettempdir())
    removed: list[Path] = []
    uid = os.getuid() if hasattr(os, "getuid") else None
    try:
        entries = list(os.scandir(base))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(TEMPORARY_PREFIX):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or (uid is not None and info.st_uid != uid):
            continue
        owner = _read_small(Path(entry.path) / OWNER_FILE)
        if owner is not None and owner_dead(owner):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    return removed


# -- a new store, placed whole by one process ------------------------------------------


class NewStore:
    """A store file to be created at `final`: written at `file` beside it, then `place`d
    there only if no other process placed one first; `discard` removes what this process
    built (never `final`)."""

    def __init__(self, final: str | os.PathLike[str]) -> None:
        self.final = Path(final)
        folder = self.final.parent
        try:
            if not stat.S_ISDIR(os.stat(folder).st_mode):
                raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        except OSError as exc:
            raise StoreError(f"cannot open store {final}: {exc.strerror or exc}") from None
        self._prefix = f".{self.final.name[:120]}."
        sweep_building(self.final)
        self.file = folder / (f"{self._prefix}{owner_token()}-{secrets.token_hex(4)}"
                              f"{_BUILDING}")

    def place(self) -> None:
        """Put the built store at `final`, atomically and only if nothing is there (an
        empty placeholder aside).

        Raises:
            StoreError: another process created `final` meanwhile; this build is removed.
        """
        try:
            self._merge_log()
        except BaseException:
            self.discard()
            raise
        try:
            os.link(self.file, self.final)
        except FileExistsError:
            if not self._fill_placeholder():
                self.discard()
                raise StoreError(
                    f"{self.final} was created by another process while this ingest ran; "
                    "this run stored nothing (run it again to add its logs to that store)"
                ) from None
            return
        except OSError as exc:
            if exc.errno not in _NO_LINKS:
                self.discard()
                raise StoreError(f"cannot write the store {self.final}: "
                                 f"{exc.strerror or exc}; this run stored nothing") from None
            self._take_name()
            return
        self.discard()  # the building name; the store is at `final`

    def _merge_log(self) -> None:
        """The build as one file: a write-ahead log DuckDB could not merge when the store
        was closed (no room for the checkpoint) is merged now, or the reason is raised.

        Raises:
            StoreError: the checkpoint failed (a full disk: the documented line).
        """
        if not os.path.exists(f"{self.file}.wal"):
            return
        store = Store.open(self.file, label=str(self.final))
        try:
            store.run("CHECKPOINT")
        except duckdb.Error as exc:
            raise StoreError(_disk_full(exc, store.named) or (
                f"cannot write the store {self.final}: {str(exc).splitlines()[0]}; this "
                "run stored nothing")) from None
        finally:
            with contextlib.suppress(duckdb.Error, StoreError):
                store.close()
        if os.path.exists(f"{self.file}.wal"):
            raise StoreError(f"cannot write the store {self.final}: DuckDB left its "
                             "write-ahead log unmerged; this run stored nothing")

    def _take_name(self) -> None:
        """No hard links here: take the name with O_EXCL, then fill it as a placeholder."""
        try:
            os.close(os.open(self.final, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
        except OSError as exc:
            if exc.errno != errno.EEXIST:
                self.discard()
                raise StoreError(f"cannot write the store {self.final}: "
                                 f"{exc.strerror or exc}; this run stored nothing") from None
        if not self._fill_placeholder():
            self.discard()
            raise StoreError(f"{self.final} was created by another process while this "
                             "ingest ran; this run stored nothing (run it again to add "
                             "its logs to that store)")

    def _fill_placeholder(self) -> bool:
        """Replace an empty regular file at `final` with the built store, holding its
        flock and finding it still the file at that name; False when it is not such."""
        import fcntl

        try:
            fd = os.open(self.final, os.O_RDONLY | os.O_NONBLOCK
                         | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return False
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return False
            held = os.fstat(fd)
            try:
                now = os.stat(self.final, follow_symlinks=False)
            except OSError:
                return False
            if not stat.S_ISREG(held.st_mode) or held.st_size or \
                    (held.st_ino, held.st_dev) != (now.st_ino, now.st_dev):
                return False
            os.replace(self.file, self.final)
            return True
        finally:
            os.close(fd)

    def discard(self) -> None:
        """Remove the building file and its write-ahead log (what this process made)."""
        for leftover in (self.file, Path(str(self.file) + ".wal")):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()


def sweep_building(final: Path) -> list[Path]:
    """Remove building files of a store at `final` left by dead processes; returns them."""
    prefix = f".{final.name[:120]}."
    removed: list[Path] = []
    try:
        names = os.listdir(final.parent)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(prefix):
            continue
        rest = name[len(prefix):]
        core = rest.removesuffix(".wal")
        if not core.endswith(_BUILDING):
            continue
        token = core.removesuffix(_BUILDING).rsplit("-", 1)[0]  # pid-start (-random)
        if owner_dead(token):
            with contextlib.suppress(OSError):
                (final.parent / name).unlink()
                removed.append(final.parent / name)
    return removed
