"""Ingest: log files of any supported format -> normalized `Request` records. Pure: it reads
files and yields values; writing them to a store is `prefixscope.store.load`'s job.

`expand_paths` expands paths (files, directories recursively, globs, ``-`` for stdin;
gzip transparently), `detect` finds each file's format from its content
(`formats.all_formats`, first ``sniff`` that says yes), `parse_source` yields the
parser's records with stable ids. A bad record is a `Skip` with its place and reason;
a file no format recognizes is reported with the formats tried (`unrecognized_reason`).
Nothing here raises for bad input.

Order inside a record: a format that rebuilds several requests from one record (a
trajectory, an OpenHands row) sets `Request.source_position` to each one's place in
it; otherwise `parse_source` numbers the requests of each line in the order the format
yields them, so (timestamp, file, line, position) orders requests that share a line.

Stable ids: a record's id is xxh3-128 of (format, the record's key, how many times
that key was already seen in the file). The key is the source's own request id
when it has one, else the canonical JSON of the raw record, so re-ingesting the
same file adds nothing.

Layout, each part importing only parts below it:

* `formats/` -- one module per source family (``NAME``, ``sniff``, ``parse``);
  ``formats/__init__.py`` is the registry, the detection order. A new format is one
  module there and one line in its ``_MODULES``;
* `normalize/` -- what several formats share about meaning: fields, usage objects,
  OTel GenAI messages, response streams, trajectory session keys;
* `source.py` -- one input file (gzip, stdin) and its `Probe` for detection;
* `readers/` -- how records come out of a container: JSON / JSON lines, CSV,
  SQLite, table exports, ClickHouse literals (and `BadRecord`).
"""

from __future__ import annotations

import errno
import glob
import os
import stat
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import xxhash

from prefixscope.ingest.engine_logs import EngineKind, EngineLogInput, engine_log_kind
from prefixscope.ingest.formats import all_formats, format_names, get_format
from prefixscope.ingest.probing import probe
from prefixscope.ingest.source import READ_ERRORS, Probe, Source
from prefixscope.model import Record, Request, Skip
from prefixscope.model.bodytext import WrittenBody, write_body
from prefixscope.model.hashing import unwritable, written
from prefixscope.model.records import MAX_CONTEXT_TOKENS

MAX_LISTED_ERRORS = 100
# A store write holds at most BATCH requests or BATCH_BYTES of request bodies (as JSON),
# whichever comes first: ingest's memory is bounded by a batch, not by the log.
BATCH = 2000
BATCH_BYTES = 32 << 20
# A batch of an agent's calls, each resending the last one's lists (`store.load._extends`),
# holds at most this much of their new text: its write holds several times what it
# inserts (0.25 GiB of Codex rollouts: peak RSS 382 MB at 8 MiB a batch, 622 MB at 32).
BATCH_NEW_BYTES = 8 << 20

# In a directory walk, files with these endings are documentation or config, never logs.
_NOT_LOGS = {
    ".md", ".rst", ".txt.md", ".yaml", ".yml", ".toml", ".ini", ".cfg", ".j2", ".jinja",
    ".py", ".js", ".ts", ".html", ".css", ".png", ".jpg", ".jpeg", ".gif", ".svg", ".pdf",
    ".lock", ".sh", ".parquet",
}
_NOT_LOG_NAMES = {"LICENSE", "NOTICE", "README", ".gitignore", ".DS_Store"}
# Hidden files are passed over in walks except the logs agents write under these names.
_HIDDEN_LOG_NAMES = {".aider.llm.history"}

# (file name, bytes done, bytes total, requests read so far)
ProgressFn = Callable[[str, int, int, int], None]


@dataclass(frozen=True, slots=True)
class IngestError:
    """One skipped record or unusable file."""

    file: str  # as given / found
    line: int | None  # 1-based line, row or element; None for the whole file
    reason: str  # one line


@dataclass
class Tally:
    """What reading a set of files ran into: counts, errors, unrecognized and empty files."""

    errors: list[IngestError] = field(default_factory=list)
    skipped: int = 0
    by_format: Counter[str] = field(default_factory=Counter)
    read: int = 0
    files: int = 0
    unrecognized: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    engine_logs: list[str] = field(default_factory=list)  # read by `engine-log`, not here
    # the engine logs among them that are files, with the kind they sniffed as: handed on
    # to the report so that none is sniffed twice
    engine_inputs: list[EngineLogInput] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)

    def error(self, file: str, line: int | None, reason: str) -> None:
        self.skipped += 1
        if len(self.errors) < MAX_LISTED_ERRORS:
            self.errors.append(IngestError(file, line, reason))


def missing_paths(paths: Iterable[str]) -> list[str]:
    """The given paths that name nothing: a path that does not exist (a broken symbolic
    link exists, and is a counted skip) or a glob that matches nothing; ``-`` is stdin."""
    out = []
    for given in paths:
        if given == "-":
            continue
        if is_glob(given):
            if not glob.glob(given, recursive=True):
                out.append(given)
        elif not os.path.lexists(given):
            out.append(given)
    return out


def expand_paths(paths: Iterable[str], tally: Tally,
                 exclude: frozenset[Path] = frozenset()) -> Iterator[Source]:
    """Sources for files, directories (recursive, sorted), globs and ``-``.

    Files in `exclude` (the store being written and its WAL) are passed over in
    directory walks: ``prefixscope ingest . --store here.duckdb`` must not read its store.
    """
    companions = [m.is_companion for m in all_formats() if hasattr(m, "is_companion")]
    if exclude:
        companions.append(lambda file: resolved(file) in exclude)
    for given in paths:
        if given == "-":
            yield Source.from_stdin()
            continue
        matches = sorted(glob.glob(given, recursive=True)) if is_glob(given) else [given]
        if not matches:
            tally.error(given, None, "no such file or directory (glob matched nothing)")
            continue
        for match in matches:
            shown = undecodable_name(match)
            if shown:
                tally.error(shown, None, NOT_UTF8)
                continue
            path = Path(match)
            if path.is_dir():
                yield from _walk(path, companions, tally)
                continue
            why = not_a_regular_file(path)
            if why:
                tally.error(match, None, why)
            else:
                yield Source.from_path(path)


def is_glob(given: str) -> bool:
    """`given` is a pattern to expand: it has ``*``, ``?`` or ``[`` and names no file or
    directory itself (a file literally named ``[abc].jsonl`` is that file)."""
    return glob.has_magic(given) and not os.path.lexists(given)


# the reason a file whose name is not UTF-8 is skipped: the store, JSON and every view
# hold names as text
NOT_UTF8 = "the file name is not valid UTF-8 (shown with \\x escapes): rename it to read it"


def undecodable_name(name: str) -> str:
    """`name` with the bytes that are not UTF-8 shown as ``\\xNN`` when it has any (the
    file system gave them as surrogate escapes), else ""."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "backslashreplace")
    return ""


def not_a_regular_file(path: Path) -> str:
    """Why `path` (symbolic links followed) is not a regular file to read, "" when it is.
    A FIFO would block the run, a device (``/dev/zero``) would stream forever."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symbolic link loop"
        if exc.errno == errno.ENOENT:
            return "broken symbolic link" if os.path.islink(path) else \
                "no such file or directory"
        return f"cannot read: {exc.strerror or exc}"
    if stat.S_ISREG(mode):
        return ""
    if stat.S_ISDIR(mode):
        return "a symbolic link to a directory: not followed in a walk (name it to read it)"
    return "not a regular file (a device, socket or pipe)"


def resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symbolic link loop (Python < 3.13)
        return path


def _walk(directory: Path, companions: list[Callable[[Path], bool]],
          tally: Tally) -> Iterator[Source]:
    """Every log file under `directory`; unreadable subdirectories and an empty walk are
    reported, never silently passed over."""
    def unreadable(exc: OSError) -> None:
        tally.error(exc.filename or str(directory), None,
                    f"cannot read directory: {exc.strerror or exc}")

    found = passed_over = 0
    for root, dirs, files in os.walk(directory, onerror=unreadable):
        visible = [d for d in dirs if not d.startswith(".")]
        # os.walk lists a link to a directory with the directories and does not enter it
        linked = [d for d in visible if os.path.islink(os.path.join(root, d))]
        dirs[:] = sorted(d for d in visible if d not in linked)
        for name in sorted(files + linked):
            file = Path(root) / name
            shown = undecodable_name(str(file))
            if shown:  # one counted skip, not a crash that loses the other files
                tally.error(shown, None, NOT_UTF8)
                continue
            if _is_documentation(file):
                tally.ignored.append(str(file))
                passed_over += 1
                continue
            why = not_a_regular_file(file)
            if why:
                tally.error(str(file), None, why)
                continue
            if any(c(file) for c in companions):
                tally.ignored.append(str(file))
                passed_over += 1
                continue
            found += 1
            yield Source.from_path(file)
    if found == 0:
        why = (f"only documentation/config files ({passed_over})" if passed_over
               else "no files")
        tally.error(str(directory), None, f"directory holds no log files: {why}")


def _is_documentation(path: Path) -> bool:
    if path.name in _NOT_LOG_NAMES or (path.name.startswith(".")
                                       and path.name not in _HIDDEN_LOG_NAMES):
        return True
    suffixes = path.suffixes
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    return bool(suffixes) and suffixes[-1].lower() in _NOT_LOGS


def detect(source: Source) -> tuple[ModuleType | None, Probe]:
    """The first format whose sniff accepts the source, and the probe used."""
    pr = probe(source)
    for module in all_formats():
        try:
            if module.sniff(pr):
                return module, pr
        except Exception:  # noqa: BLE001 - a sniffer must never stop detection
            continue
    return None, pr


def record_id(fmt: str, key: str, occurrence: int) -> str:
    return xxhash.xxh3_128_hexdigest(f"{fmt}\x00{key}\x00{occurrence}".encode())


def parse_source(source: Source, module: ModuleType, pr: object) -> Iterator[Request | Skip]:
    """Parse one source, assigning stable ids; yields requests and skips."""
    for item in parse_serialized(source, module, pr):
        yield item if isinstance(item, Skip) else item[0]


def parse_serialized(source: Source, module: ModuleType, pr: object
                     ) -> Iterator[tuple[Request, WrittenBody | None] | Skip]:
    """`parse_source` with each request's body written (`bodytext.write_body`; None: no
    body), as its serialize test wrote it (`checked`): a store write hashes and keeps those
    pieces instead of serializing the body again (a Codex rollout's 351 calls resend 114 MB
    of history; a captured request's hundreds of KB were written twice)."""
    # occurrences of each record key, counted by the key's hash: a key can be a whole
    # record's canonical JSON, and a log of them must not be held in memory
    seen: Counter[int] = Counter()
    per_line: Counter[int | None] = Counter()  # requests already read from each line
    parser = module.parse(source, pr)
    while True:
        try:
            item = next(parser)
        except StopIteration:
            return
        except READ_ERRORS as exc:
            yield Skip(None, f"read failed part-way, the rest of the file is lost: "
                             f"{io_reason(exc)}")
            return
        except Exception as exc:  # noqa: BLE001 - a parser bug must not kill the run
            yield Skip(None, f"{module.NAME} parser stopped: {type(exc).__name__}: {exc}")
            return
        if isinstance(item, Skip):
            yield item
            continue
        assert isinstance(item, Record)
        why, body_text = checked(item.request)
        if why:
            yield Skip(item.request.source_line, why)
            continue
        key_hash = xxhash.xxh3_128_intdigest(item.key.encode())
        occurrence = seen[key_hash]
        seen[key_hash] += 1
        line = item.request.source_line
        position = item.request.source_position
        if position is None:  # the format did not say: the order it read them in
            position = per_line[line]
        per_line[line] += 1
        yield replace(item.request, id=record_id(module.NAME, item.key, occurrence),
                      source_format=module.NAME, source_file=source.name,
                      source_position=position), body_text


# A model call is made between these (naive UTC): an earlier or later date is a zero or
# placeholder date ("0001-01-01"), or a number read in the wrong unit, and analyses that
# step back from it (a session gap, a cache lifetime) would leave the calendar.
EARLIEST = datetime(1970, 1, 1)
LATEST = datetime(2101, 1, 1)


def unusable(request: Request) -> str:
    """Why ingest skips `request` ("" to keep it), one line: its time is outside 1970-2100;
    it reports a token count no context window holds (`MAX_CONTEXT_TOKENS`, named in
    ``usage.impossible``): one such count made a hit rate 0% and the spend $11 million;
    or a body, response or metadata is nested deeper than the store's JSON writer goes
    (the readers skip such records; a format can nest what it read a few levels more)."""
    return checked(request)[0]


def checked(request: Request) -> tuple[str, WrittenBody | None]:
    """(`unusable(request)`, the body written as the store keeps it: `bodytext.write_body`):
    the body's serialize test is its serialization, kept (None when there is no body or the
    request is skipped)."""
    when = [request.timestamp, *(e.timestamp for e in request.events)]
    for ts in when:
        if ts is None:
            continue
        # a reader may give an aware time (LMCache's Unix seconds, tz=UTC): compared in UTC
        naive = ts.astimezone(UTC).replace(tzinfo=None) if ts.tzinfo else ts
        if not EARLIEST <= naive < LATEST:
            what = "its time" if ts is request.timestamp else "a session event it carries"
            return (f"{what}, {ts.isoformat()}, is outside 1970-2100 (a placeholder date, "
                    "or a number in the wrong unit): not when a model call was made"), None
    if request.usage.impossible:
        return (f"token counts no context window holds ({', '.join(request.usage.impossible)}"
                f"; the bound is {MAX_CONTEXT_TOKENS:,}, the largest published window): a "
                "damaged counter, so the call is left out of every total"), None
    body_text = None
    if request.body is not None:
        try:
            body_text = write_body(request.body)
        except TypeError:
            why = written(request.body)[1]
            # a piece fails exactly when the whole body does (`bodytext`, its tests): the
            # whole body's serialization says why, as before the body was split
            assert why, "a body piece failed to serialize but the whole body did not"
            return why, None
    for part in (request.output, request.metadata):
        why = unwritable(part) if part else ""
        if why:
            return why, None
    return "", body_text


class UnreadableFile(ValueError):
    """No container fits the content at all (empty, binary, unparseable JSON document)."""


def read_requests(path: str | Path, fmt: str = "auto") -> tuple[list[Request], list[Skip]]:
    """Parse one file without a store (tests, render/diff of a file).

    Raises:
        ValueError: no format recognizes the file (the message says why), or the
            forced format cannot read it at all.
    """
    source = Source.from_stdin() if str(path) == "-" else Source.from_path(Path(path))
    try:
        return read_requests_from(source, fmt)
    finally:
        source.close()


def read_requests_from(source: Source, fmt: str = "auto") -> tuple[list[Request], list[Skip]]:
    """`read_requests` of an open `Source` (which the caller closes)."""
    if fmt == "auto":
        module, pr = detect(source)
        if module is None:
            unreadable = unreadable_reason(pr)
            if unreadable:
                raise UnreadableFile(unreadable)
            raise ValueError(unrecognized_reason(source, pr))
    else:
        module, pr = get_format(fmt), probe(source)
        reason = forced_mismatch(module, pr)
        if reason:
            raise ValueError(reason)
    requests: list[Request] = []
    skips: list[Skip] = []
    for item in parse_source(source, module, pr):
        (skips if isinstance(item, Skip) else requests).append(item)  # type: ignore[arg-type]
    return requests, skips


def engine_kind(pr: Probe) -> EngineKind | None:
    """The serving-engine log kind of a file no request format claims (vLLM / SGLang server
    log, Prometheus dump), or None. Such files hold no model calls: `engine-log` reads them."""
    if pr.kind not in ("text", "csv"):  # an SGLang log's "[2026-..." probes as bad JSON
        return None
    return engine_log_kind(pr.text)


def unrecognized_reason(source: Source, pr: Probe | None = None) -> str:
    """One line saying what the file is and why no format claims it."""
    tried = f"not a recognized log format (tried: {', '.join(format_names())})"
    if pr is None:
        return tried
    unreadable = unreadable_reason(pr)
    if unreadable:
        return unreadable
    engine = engine_kind(pr)
    if engine is not None:
        what = "a Prometheus /metrics dump" if engine == "prometheus" else f"a {engine} server log"
        return (f"{what}: it holds engine statistics, not model calls "
                "(read it with `prefixscope engine-log`)")
    if pr.kind == "sqlite":
        tables = ", ".join(pr.tables) or "none"
        return (f"SQLite database without a known log table (tables: {_cut(tables)}); "
                "new-api, LiteLLM and Bifrost databases are read")
    if pr.kind == "csv":
        return (f"CSV columns match no known export (columns: {_cut(', '.join(pr.header or []))})"
                f"; {tried}")
    if pr.kind in ("json", "jsonl"):
        container = "JSON lines" if pr.kind == "jsonl" else "JSON"
        if isinstance(pr.first, dict):
            keys = _cut(", ".join(map(str, pr.first)))
            return f"{container} whose first record has keys {keys or '(none)'}: {tried}"
        return f"{container} whose first record is a {type(pr.first).__name__}: {tried}"
    return tried


def unreadable_reason(pr: Probe) -> str:
    """Why no format can read this content at all ("" when some container fits)."""
    if pr.problem:
        return pr.problem
    if pr.kind == "empty":
        return "empty file"
    if pr.kind == "binary":
        return "binary content: not a text log, a JSON/CSV export or a SQLite database"
    return ""


def _cut(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def forced_mismatch(module: ModuleType, pr: Probe) -> str:
    """Why a file cannot be read with a forced ``--format`` at all ("" when it can be tried).

    Only whole-file facts are checked here (empty, binary, unparseable, a SQLite
    database without the format's table); a readable container is handed to the
    parser, which reports each record it cannot use.
    """
    unreadable = unreadable_reason(pr)
    if unreadable:
        return unreadable
    if pr.kind == "sqlite":
        try:
            has_table = bool(module.sniff(pr))
        except Exception:  # noqa: BLE001 - a sniffer must never stop ingest
            has_table = False
        if not has_table:
            tables = ", ".join(pr.tables) or "none"
            return (f"--format {module.NAME}: this SQLite database has no {module.NAME} log "
                    f"table (tables: {_cut(tables)})")
    return ""


def is_json_schema(pr: object) -> bool:
    """A JSON Schema document (e.g. the OTel GenAI schemas) describes logs; it is not one."""
    doc = getattr(pr, "document", None)
    return isinstance(doc, dict) and ("$schema" in doc or "$defs" in doc)


def io_reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
