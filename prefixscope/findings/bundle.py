"""A share-safe bundle: a report's inputs without the prompts' text, that another machine
ingests and reports on to the same ledger, hit rates and findings (docs/bundle.md).

`write_bundle` writes a directory of two files:

* ``requests.jsonl`` -- one line per request, in the Mooncake / Bailian trace shape
  (``timestamp`` in milliseconds from the first request, ``input_length``,
  ``output_length``, ``hash_ids``: one id per `BLOCK_SIZE`-token block of the rendered
  prompt, chained on the block before it, so equal ids mean equal prefixes) that other
  simulators replay, plus prefixscope's fields under ``prefixscope_bundle``: the time,
  session, predecessor, model, backend, usage, each segment's path, kind, token span,
  block range and content hash, and the ledger's cause labels for the request. The
  ingest format ``bundle`` reads it (`prefixscope.ingest.formats.bundle`).
* ``evidence.json`` -- the text-free evidence the report's text-dependent steps produced
  (each consecutive pair's first divergent token, cause, kind and blamed segment path;
  each request's replay; the segments census; the bucket split), with every excerpt
  field (`TEXT_FIELDS`) emptied. ``prefixscope report DIR`` decodes it (`read_bundle`)
  and recomputes the ledger, its prices, the TTL what-ifs and every finding from it.

Hashes: every block and segment hash is BLAKE2b keyed with 32 random bytes drawn for the
bundle (`secrets.token_bytes`) and never written anywhere, so equal token runs hash equal
within the bundle (a receiver compares prefixes) while nobody without the key -- the
receiver included -- can test a guess ("is this segment the string `yes`?"). Block
hashes are then renumbered 0, 1, 2... in order of first appearance, as Mooncake's trace
numbers its blocks: ``hash_ids`` carry the equality structure and nothing else.

The evidence codec (`encode` / `decode`) writes the frozen dataclasses as tagged JSON and
rebuilds only dataclasses and enums of prefixscope's own modules, already loaded (it
imports nothing a bundle names): a bundle names no other callable.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import math
import re
import secrets
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import date, datetime
from pathlib import Path
from typing import Any

import orjson

from prefixscope.findings.evidence import Evidence
from prefixscope.findings.finders.breakage import _BILLING as BILLING
from prefixscope.model import Request
from prefixscope.model.atomic import atomic_path
from prefixscope.prompt import RenderOptions
from prefixscope.prompt.whatif import BILLING_PREFIX

BUNDLE_VERSION = 1
REQUESTS_FILE = "requests.jsonl"
EVIDENCE_FILE = "evidence.json"
MARK = "prefixscope_bundle"  # the key of prefixscope's fields in a requests.jsonl line
BLOCK_SIZE = 16  # tokens per hash id (Bailian's block; vLLM's default)
_KEY_BYTES = 32
_DIGEST_BYTES = 16
# (class name, field) -> emptied in the bundle: text of the prompts around a divergence,
# a segment's preview, the tokens at the split, a diff's sentence quoting what changed.
TEXT_FIELDS: frozenset[tuple[str, str]] = frozenset({
    ("Divergence", "text_a"), ("Divergence", "text_b"), ("Divergence", "token_a"),
    ("Divergence", "token_b"), ("PairDiff", "detail"), ("SegmentStats", "preview"),
})
# An excerpt showing Claude Code's billing header changing becomes this fixed text (the
# header's public name, no value of it): the finding still names the header and its fix.
BILLING_MARK = f"{BILLING_PREFIX} cch=…"
# A recorded session event's detail is emptied too (a compaction's message, the tools a
# tool-set delta names), but for these kinds, whose detail is "before -> after" of the
# model, the client version or the reasoning effort (metadata the bundle carries anyway),
# or, for a history rewrite, counts the reader wrote itself (Codex: how many reasoning items
# a user turn dropped; Claude Code's micro-compaction: its trigger, tokens saved and how
# many tool results it cleared), never the prompts' text.
KEPT_EVENT_DETAILS = frozenset({"model-change", "client-upgrade", "settings-change",
                                "history-rewrite"})


# A segment path (`prompt.Segment.path`) inside any string: where names follow.
_PATH = re.compile(r"(?<![\w.#])(?:tools|messages|system|input)\[\d+\]"
                   r"(?:\[\d+\]|\.[^\s.\[\],;'\"()]+)*")
# After one of these, the components of a segment path are names the prompt chose (a
# tool's parameters, a call's arguments), not the protocol's; JSON-schema words are kept.
_NAMED = frozenset({"properties", "arguments", "input", "patternProperties", "$defs",
                    "definitions"})
_SCHEMA_WORDS = frozenset({"properties", "items", "type", "description", "enum", "required",
                           "default", "anyOf", "oneOf", "allOf", "additionalProperties",
                           "title", "format", "const", "minimum", "maximum"})


class BundleError(ValueError):
    """A bundle that cannot be read or written (one line)."""


@dataclasses.dataclass(frozen=True, slots=True)
class BundleWritten:
    """What `write_bundle` wrote."""

    directory: Path
    files: tuple[Path, ...]
    requests: int  # lines of requests.jsonl
    hashed: int  # of them, with a rendered prompt (hash_ids and segments)
    skipped: int  # requests with a body that could not be rendered (no hash_ids)


# ---------------------------------------------------------------------------------------
# The codec


def encode(value: Any, text: Callable[[str], str] | None = None) -> Any:
    """`value` as JSON-able data, tagged so that `decode` rebuilds it (see module doc);
    every string (mapping keys too) passed through `text` when given."""
    if isinstance(value, str):
        return text(value) if text is not None else value
    if value is None or isinstance(value, (bool, int)):
        return value
    return _encode(value, text or _same)


def _same(value: str) -> str:
    return value


def _encode(value: Any, text: Callable[[str], str]) -> Any:
    def encode(item: Any) -> Any:
        if isinstance(item, str):
            return text(item)
        if item is None or isinstance(item, (bool, int)):
            return item
        return _encode(item, text)

    if isinstance(value, float):
        return value if math.isfinite(value) else {"$f": repr(value)}
    if isinstance(value, enum.Enum):
        return {"$e": _name(type(value)), "v": encode(value.value)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        return {"$dc": _name(cls), "f": {
            f.name: _emptied(getattr(value, f.name)) if _is_text(value, f.name)
            else encode(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}}
    if isinstance(value, tuple):
        return {"$t": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return {"$fs" if isinstance(value, frozenset) else "$s": [encode(v) for v in value]}
    if isinstance(value, Mapping):
        tag = "$c" if isinstance(value, Counter) else "$m"
        return {tag: [[encode(k), encode(v)] for k, v in value.items()]}
    if isinstance(value, datetime):
        return {"$dt": value.isoformat()}
    if isinstance(value, date):
        return {"$d": value.isoformat()}
    if isinstance(value, Path):
        return {"$p": str(value)}
    item = getattr(value, "item", None)  # a numpy scalar
    if callable(item):
        return encode(item())
    tolist = getattr(value, "tolist", None)  # a numpy array
    if callable(tolist):
        return [encode(v) for v in tolist()]
    raise BundleError(f"cannot write a {type(value).__name__} into a bundle")


def decode(data: Any) -> Any:
    """The value `encode` wrote.

    Raises:
        BundleError: a tag or a class that is not prefixscope's.
    """
    if isinstance(data, list):
        return [decode(v) for v in data]
    if not isinstance(data, dict):
        return data
    if len(data) == 1:
        (tag, inner), = data.items()
        if tag == "$t":
            return tuple(decode(v) for v in inner)
        if tag == "$m":
            return {decode(k): decode(v) for k, v in inner}
        if tag == "$c":
            return Counter({decode(k): decode(v) for k, v in inner})
        if tag == "$fs":
            return frozenset(decode(v) for v in inner)
        if tag == "$s":
            return {decode(v) for v in inner}
        if tag == "$f":
            return float(inner)
        if tag == "$dt":
            return datetime.fromisoformat(inner)
        if tag == "$d":
            return date.fromisoformat(inner)
        if tag == "$p":
            return Path(inner)
    if set(data) == {"$dc", "f"}:
        cls = _class(data["$dc"])
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            raise BundleError(f"{data['$dc']} is not a dataclass")
        # a field an older version stored that this one derives (a property now, as
        # `RecordedCost.compared_*` became) is not passed back: the bundle stays readable
        return cls(**{k: decode(v) for k, v in data["f"].items()
                      if not isinstance(getattr(cls, k, None), property)})
    if set(data) == {"$e", "v"}:
        cls = _class(data["$e"])
        if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
            raise BundleError(f"{data['$e']} is not an enum")
        return cls(decode(data["v"]))
    raise BundleError(f"unknown value in the bundle's evidence: keys {sorted(data)[:3]}")


def _is_text(value: Any, name: str) -> bool:
    """The field `name` of `value` holds the prompts' text (`TEXT_FIELDS`)."""
    cls = type(value).__name__
    if cls == "SessionEvent" and name == "detail":
        return getattr(value, "kind", None) not in KEPT_EVENT_DETAILS
    return (cls, name) in TEXT_FIELDS


def _emptied(text: Any) -> str | None:
    """What an excerpt field holds in a bundle: nothing, or `BILLING_MARK` for a change in
    Claude Code's billing header (the breakage finder names that header and its fix)."""
    if not isinstance(text, str):
        return None
    return BILLING_MARK if BILLING.search(text) else ""


def _name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


# Classes a bundle of this version may name where they were defined when it was written:
# the evidence's and the policy's values moved to `findings.values` (no import circle in
# findings/, issue 38), and a bundle written before names their old modules.
MOVED = {f"prefixscope.findings.{old}:{name}": f"prefixscope.findings.values:{name}"
         for old, names in (("evidence", ("Evidence",)),
                            ("policy", ("Policy", "PolicyPart", "PolicyOption", "TurnFigures")))
         for name in names}


def _class(name: str) -> Any:
    """The class `name` ("module:qualname") names, among those of prefixscope's modules this
    process has loaded: a bundle names classes, it never makes Python import anything."""
    module, _, qualname = MOVED.get(name, name).partition(":")
    loaded = sys.modules.get(module)
    if loaded is None or not (module == "prefixscope" or module.startswith("prefixscope.")):
        raise BundleError(f"the bundle names {name!r}, not a class of this prefixscope's "
                          "(a bundle from another version?)")
    target: Any = loaded
    for part in qualname.split("."):
        target = getattr(target, part, None)
    if not isinstance(target, type) or target.__module__ != module:
        raise BundleError(f"the bundle names {name!r}, not a class of this prefixscope's "
                          "(a bundle from another version?)")
    return target


# ---------------------------------------------------------------------------------------
# Writing


class _Hasher:
    """Keyed hashes of token runs, and Mooncake-style block ids (module doc)."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key if key is not None else secrets.token_bytes(_KEY_BYTES)
        self._ids: dict[bytes, int] = {}

    def digest(self, data: bytes) -> bytes:
        return hashlib.blake2b(data, key=self._key, digest_size=_DIGEST_BYTES).digest()

    def paths(self, text: str) -> str:
        """`text` with the names a prompt chose in each segment path it holds (a tool's
        parameter names, a call's argument keys: `_NAMED`) keyed and hashed as
        ``#`` + 8 hex digits, the same name the same way throughout the bundle."""
        if "[" not in text:
            return text
        return _PATH.sub(lambda m: self._path(m.group(0)), text)

    def _path(self, path: str) -> str:
        parts = path.split(".")
        named = False
        for i, part in enumerate(parts):
            if named and part.split("[", 1)[0] not in _SCHEMA_WORDS:
                name, bracket, rest = part.partition("[")
                parts[i] = "#" + self.digest(name.encode())[:4].hex() + bracket + rest
            named = named or part in _NAMED and i > 0
        return ".".join(parts)

    def segment(self, ids: Any) -> str:
        return self.digest(ids.astype("<u4").tobytes()).hex()

    def blocks(self, ids: Any) -> list[int]:
        """One id per `BLOCK_SIZE` tokens (the last block may be partial), each chained on
        the one before it."""
        raw = ids.astype("<u4")
        out = []
        parent = b""
        for start in range(0, len(raw), BLOCK_SIZE):
            parent = self.digest(parent + raw[start:start + BLOCK_SIZE].tobytes())
            out.append(self._ids.setdefault(parent, len(self._ids)))
        return out


def write_bundle(evidence: Evidence, requests: Iterable[Request], directory: Path,
                 render: RenderOptions, key: bytes | None = None) -> BundleWritten:
    """Write the bundle of a report's `evidence` into `directory` (module doc).

    Args:
        evidence: what `findings.evidence.gather` found over the store.
        requests: the store's requests (with bodies), any order.
        directory: created if missing; its two files are replaced whole.
        render: how the report rendered the prompts (the hashes are of those tokens).
        key: the hash key (tests); None draws a random one, never written.

    Raises:
        BundleError: the directory cannot be written (one line).
    """
    from prefixscope.prompt import RenderError
    from prefixscope.tokenizers import TokenizerError
    from prefixscope.tokens import tokens

    hasher = _Hasher(key)
    records = {r.id: r for r in evidence.records}
    entries = {e.id: e for e in evidence.ledger.entries} if evidence.ledger else {}
    stamps = [r.timestamp for r in evidence.records if r.timestamp is not None]
    start = min(stamps) if stamps else None
    hashed = skipped = 0
    lines: dict[str, bytes] = {}
    for request in requests:
        record = records.get(request.id)
        if record is None:
            continue
        fields: dict[str, Any] = {"id": request.id}
        hash_ids: list[int] = []
        if request.body is not None:
            try:
                toks = tokens(request, render)
            except (RenderError, TokenizerError, ValueError):
                skipped += 1
            else:
                hashed += 1
                hash_ids = hasher.blocks(toks.ids)
                fields["segments"] = [
                    {"path": hasher.paths(seg.path), "kind": seg.kind, "tokens": [a, b],
                     "blocks": [a // BLOCK_SIZE, -(-b // BLOCK_SIZE)],
                     "hash": hasher.segment(toks.ids[a:b])}
                    for seg, (a, b) in zip(toks.prompt.segments, toks.segment_token_spans(),
                                           strict=True)]
                fields["rendered_tokens"] = len(toks)
        fields.update(_request_fields(request, record, entries.get(request.id)))
        offset = (record.timestamp - start).total_seconds() * 1000 \
            if record.timestamp is not None and start is not None else None
        line = {"timestamp": None if offset is None else round(offset),
                "input_length": record.prompt_tokens if record.prompt_tokens is not None
                else fields.get("rendered_tokens", 0),
                "output_length": record.output_tokens or 0,
                "hash_ids": hash_ids, MARK: fields}
        lines[request.id] = orjson.dumps(line) + b"\n"
    manifest = {"version": BUNDLE_VERSION, "block_size": BLOCK_SIZE,
                "hash": "blake2b-128 keyed with a per-bundle random key, not kept",
                "render": {"gateway": render.gateway, "tokenizer": render.tokenizer}}
    payload = {"bundle": manifest, "evidence": encode(evidence, hasher.paths)}
    try:
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / REQUESTS_FILE
        with atomic_path(target) as tmp, tmp.open("wb") as out:
            for record in evidence.records:  # the report's order
                if record.id in lines:
                    out.write(lines[record.id])
        evidence_target = directory / EVIDENCE_FILE
        with atomic_path(evidence_target) as tmp:
            tmp.write_bytes(orjson.dumps(payload))
    except OSError as exc:
        raise BundleError(f"cannot write the bundle into {directory}: "
                          f"{exc.strerror or exc}") from None
    return BundleWritten(directory, (target, evidence_target), len(lines), hashed, skipped)


def _request_fields(request: Request, record: Any, entry: Any) -> dict[str, Any]:
    usage = request.usage
    fields: dict[str, Any] = {
        "time": None if record.timestamp is None else record.timestamp.isoformat(),
        "session": record.session, "prev": record.prev_id,
        "compaction": record.compaction, "model": record.model, "endpoint": record.endpoint,
        "backend": backend(request),
        "usage": {"prompt_tokens": usage.prompt_tokens, "cached_tokens": usage.cached_tokens,
                  "cache_write_tokens": usage.cache_write_tokens,
                  "cache_write_1h_tokens": usage.cache_write_1h_tokens,
                  "output_tokens": usage.output_tokens, "semantics": usage.semantics},
    }
    if entry is not None:
        fields["ledger"] = {"causes": dict(entry.causes), "break_kind": entry.break_kind,
                            "break_segment": entry.break_segment,
                            "recorded": entry.recorded, "engine": entry.engine}
    return fields


# Where a log names the backend that served a call: OpenRouter's provider, LiteLLM's
# deployment, a gateway's channel.
_BACKEND_KEYS = ("provider", "model_id", "api_base", "deployment")


def backend(request: Request) -> str | None:
    """The backend that served `request`, where its log says (None: not recorded)."""
    for name in _BACKEND_KEYS:
        value = request.metadata.get(name)
        if isinstance(value, str) and value:
            return value
    return request.channel


# ---------------------------------------------------------------------------------------
# Reading


def bundle_directory(source_files: Iterable[str]) -> Path | None:
    """The bundle directory the store's requests were all ingested from (None: the store
    holds other logs, or more than one bundle)."""
    dirs = {Path(f).parent for f in source_files}
    if len(dirs) != 1:
        return None
    (found,) = dirs
    return found if (found / EVIDENCE_FILE).is_file() else None


def read_bundle(directory: Path) -> Evidence:
    """The evidence `write_bundle` wrote into `directory`.

    Raises:
        BundleError: a missing or damaged evidence file, or one of another version.
    """
    target = directory / EVIDENCE_FILE
    try:
        payload = orjson.loads(target.read_bytes())
    except OSError as exc:
        raise BundleError(f"cannot read {target}: {exc.strerror or exc}") from None
    except orjson.JSONDecodeError as exc:
        raise BundleError(f"{target} is not JSON: {exc}") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("bundle"), dict):
        raise BundleError(f"{target} is not a prefixscope bundle's evidence")
    version = payload["bundle"].get("version")
    if version != BUNDLE_VERSION:
        raise BundleError(f"{target} is bundle version {version!r}; this prefixscope reads "
                          f"version {BUNDLE_VERSION}")
    try:
        evidence = decode(payload.get("evidence"))
    except (TypeError, ValueError) as exc:
        raise BundleError(f"{target}: {str(exc).splitlines()[0]}") from None
    if not isinstance(evidence, Evidence):
        raise BundleError(f"{target} holds no report evidence")
    return evidence
