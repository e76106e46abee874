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
* a file is verified before use: it holds the key it was written under (kind, format,
  the content hash of the source it was derived from) and an xxh3-128 digest of that
  key and every array (name, dtype, shape, bytes); a file whose key or digest does not
  match -- values edited, a file copied from another key -- is rebuilt and replaced. The
  digest finds damage and mix-ups, not a writer who recomputes it: the cache directory
  must be writable by its user only, as ``~/.cache`` is;
* only a regular file is read: it is opened non-blocking and ``fstat``-ed before a byte
  is read, so a FIFO (which would block ``render`` forever) or a device planted under a
  cache name is passed over and the data rebuilt in memory;
* a cache that cannot be written (read-only home, full disk) is skipped silently: the
  data is rebuilt on every run, nothing fails.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import xxhash

from prefixscope.model.regular import open_regular

# Bump when the arrays written for a kind change meaning (2: the key and digest inside).
FORMAT = "2"
# The arrays every file holds besides its data: the key it was written under, and the
# digest of that key and the data.
_KEY, _DIGEST = "_key", "_digest"


def cache_dir() -> Path:
    """The user's prefixscope cache directory (not created here).

    Raises:
        TokenizerError: ``$PREFIXSCOPE_CACHE_DIR`` or ``$XDG_CACHE_HOME`` starts with a
            ``~user`` that names no user, or no home directory can be found (one line).
    """
    explicit = os.environ.get("PREFIXSCOPE_CACHE_DIR")
    xdg = os.environ.get("XDG_CACHE_HOME")
    try:
        if explicit:
            return Path(explicit).expanduser()
        base = Path(xdg).expanduser() if xdg and Path(xdg).is_absolute() else (
            Path.home() / ".cache")
    except RuntimeError as exc:  # Path.expanduser / Path.home: no such user or home
        from prefixscope.tokenizers.base import TokenizerError

        name, value = (("PREFIXSCOPE_CACHE_DIR", explicit) if explicit
                       else ("XDG_CACHE_HOME", xdg) if xdg else ("HOME", ""))
        raise TokenizerError(f"the cache directory cannot be found: {name}={value!r}: "
                             f"{str(exc).rstrip('.').lower()} (set {name} to a folder, "
                             "e.g. PREFIXSCOPE_CACHE_DIR=/tmp/prefixscope-cache)") from None
    return base / "prefixscope"


def _path(kind: str, key: str) -> Path:
    return cache_dir() / "tokenizers" / f"{kind}-v{FORMAT}-{key}.npz"


def _digest(key: str, arrays: dict[str, np.ndarray]) -> str:
    """xxh3-128 of `key` and every array (name, dtype, shape, bytes), names sorted."""
    h = xxhash.xxh3_128(key.encode())
    for name in sorted(arrays):
        arr = np.ascontiguousarray(arrays[name])
        h.update(f"\0{name}\0{arr.dtype.str}\0{arr.shape}\0".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def _text(arr: np.ndarray) -> str | None:
    try:
        return bytes(arr.astype(np.uint8, copy=False).tobytes()).decode("ascii")
    except (UnicodeDecodeError, ValueError, TypeError):
        return None


def load_arrays(kind: str, key: str, names: tuple[str, ...]) -> dict[str, np.ndarray] | None:
    """The arrays saved under (`kind`, `key`), or None when absent, unreadable, not a
    regular file, or not verified (its key or digest does not match).

    Every name in `names` must be in the file, else it counts as unreadable.
    """
    path = _path(kind, key)
    try:
        with open_regular(path) as fh, np.load(fh, allow_pickle=False) as data:
            if not all(name in data.files for name in (*names, _KEY, _DIGEST)):
                return None
            arrays = {name: data[name] for name in data.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile):
        return None
    stored_key, digest = _text(arrays.pop(_KEY)), _text(arrays.pop(_DIGEST))
    if stored_key != path.stem or digest != _digest(path.stem, arrays):
        return None
    return {name: arrays[name] for name in names}


def save_arrays(kind: str, key: str, arrays: dict[str, np.ndarray]) -> None:
    """Save `arrays` under (`kind`, `key`) atomically; a cache that cannot be written is
    skipped."""
    path = _path(kind, key)
    tmp_name = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp",
                                        dir=path.parent)
        key_text = path.stem
        with os.fdopen(fd, "wb") as out:
            np.savez(out, **arrays, **{  # type: ignore[arg-type]
                _KEY: np.frombuffer(key_text.encode(), dtype=np.uint8),
                _DIGEST: np.frombuffer(_digest(key_text, arrays).encode(), dtype=np.uint8)})
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
