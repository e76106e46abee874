"""prefixscope's cache directory, and derived tokenizer data kept there between runs.

Loading a tokenizer spends most of its time deriving things from the vocabulary file
that never change while the file does not: the byte length of every token, the
tiktoken rank table decoded from base64. A small command runs for about a second, so
these are computed once and kept as NumPy arrays in ``<cache>/tokenizers/``, in a file
named by the kind of data, a format version and the content hash of what it was derived
from. The directory is ``$PREFIXSCOPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/prefixscope``,
else ``~/.cache/prefixscope``.

Rules that make the cache safe to share and to lose:

* a file is written to a temporary name in the same directory and renamed into place
  (``os.replace`` is atomic), so concurrent processes never read half a file; two
  writers of the same key write the same bytes;
* anything unreadable (truncated, corrupt, another format, wrong arrays) is ignored and
  rebuilt; arrays are loaded with ``allow_pickle=False``, so a planted file is data only;
* a cache that cannot be written (read-only home, full disk) is skipped silently: the
  data is rebuilt on every run, nothing fails.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

# Bump when the arrays written for a kind change meaning.
FORMAT = "1"


def cache_dir() -> Path:
    """The user's prefixscope cache directory (not created here)."""
    explicit = os.environ.get("PREFIXSCOPE_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg and Path(xdg).is_absolute() else (
        Path.home() / ".cache")
    return base / "prefixscope"


def _path(kind: str, key: str) -> Path:
    return cache_dir() / "tokenizers" / f"{kind}-v{FORMAT}-{key}.npz"


def load_arrays(kind: str, key: str, names: tuple[str, ...]) -> dict[str, np.ndarray] | None:
    """The arrays saved under (`kind`, `key`), or None when absent or unreadable.

    Every name in `names` must be in the file, else it counts as unreadable.
    """
    path = _path(kind, key)
    try:
        with np.load(path, allow_pickle=False) as data:
            if not all(name in data.files for name in names):
                return None
            return {name: data[name] for name in names}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile):
        return None


def save_arrays(kind: str, key: str, arrays: dict[str, np.ndarray]) -> None:
    """Save `arrays` under (`kind`, `key`) atomically; a cache that cannot be written is
    skipped."""
    path = _path(kind, key)
    tmp_name = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp",
                                        dir=path.parent)
        with os.fdopen(fd, "wb") as out:
            np.savez(out, **arrays)  # type: ignore[arg-type]
        os.replace(tmp_name, path)
        tmp_name = None
    except OSError:
        pass
    finally:
        if tmp_name is not None:
            try:
                os.unlink(tmp_name)
            except OSError:
                pass
