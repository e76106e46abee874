"""Exact, fast tokenization of rendered prompts, with a content-addressed piece cache.

Consecutive turns of a session share 95-99% of their prompt text, and a run renders
thousands of them. Tokenizing each prompt whole repeats almost all the work. This
module splits every prompt at *boundaries where tokenization is provably
independent*, keys each piece by ``xxh3_128(piece, seed=tokenizer identity)``,
tokenizes each distinct piece once per run (an in-memory dict; optionally
persisted to SQLite), and concatenates. `tokens` is the one API diff, bucket and
simulate use: token ids, the segment of each token, token start offsets.

Proof obligation (why the concatenation equals tokenizing the whole prompt):

* HF ``tokenizers`` first extracts added tokens from the raw text (leftmost-longest
  match over all added tokens; tokens flagged ``normalized`` are matched on the
  normalized text), then normalizes, pre-tokenizes and BPE-encodes each remaining
  stretch on its own. tiktoken likewise finds special tokens with a regex before
  running BPE on the stretches between them; the bundled Qwen tokenizers add NFC per
  stretch, as Qwen's HF normalizer does. So the ids of a text are the ids of its
  stretches between added-token matches, concatenated.
* We split only at occurrences of *split tokens* S (`split_tokens`): added tokens
  the chat template writes, with no ``lstrip``/``rstrip``/``single_word`` behaviour,
  matched on raw text (or the normalizer is the identity), such that no added token
  T overlaps S (T contains S, or a proper suffix of T is a proper prefix of S). Then
  every occurrence of S is a match of the tokenizer's own scan -- nothing can start
  earlier and cover it, nothing longer can start at it -- so our split points are a
  subset of the tokenizer's and each piece is tokenized exactly as inside the whole.
* A pre-tokenizer that behaves differently at the start of the input (Metaspace
  ``prepend_scheme: "first"``) breaks the argument; such tokenizers are never split
  (`Tokenizer.piece_safe`).

This is checked, not just argued: Hypothesis tests for each bundled tokenizer and a
test over every request rebuilt from the real trajectories compare against
whole-prompt tokenization.

A new piece long enough is looked up in chunks, cut at line starts where the tokenizer's
own pre-tokenization provably always cuts (`tokenizers.boundaries`, the proof there), at
places chosen by the text after them: one changed line in a long piece (a billing header
with a new hash in the system prompt, tool schemas with sorted keys) re-tokenizes the
chunk holding it, and the piece's ids are its chunks' end to end.

A session's next prompt starts with most of the previous one (`encode_many`'s
``previous``): the ids of the shared text up to the end of the last split-token
occurrence inside it are the previous prompt's, and only the rest is laid out and looked
up. Why that is exact: the argument above shows that *any* occurrence of a split token is
a match of the tokenizer's scan, whatever surrounds it (no match starting earlier can
reach into it, none starting at it is longer). An occurrence inside the shared text is at
the same place in both texts, so both tokenizations split there: the ids before it are
the ids of the same characters, and the ids from it on are those of the rest on its own.
A prompt that differs from the previous one early (its head changed: a billing header's
new hash) and then runs on as it (the same history) takes that run's ids from the
previous prompt too (`PieceCache._middle`): the run starts and ends at split-token
occurrences of both texts, so by the same argument its ids are those of its characters
alone.

A turn's arrays are not copied from its predecessor's when they start with all of them
(the previous prompt ends with a split token, the generation prompt, and this one goes on
from it: most turns of a session; or it ends with a few tokens after the last split token,
laid out again as the same tokens: o200k-harmony's ``<|start|>assistant``): a session's
arrays live in one buffer with room to grow (`_Run`), each turn's `Tokens` are read-only
views of its first entries, and a turn that extends the last one written appends after it.
Why no view ever changes: a buffer is written only past `_Run.used` (the tokens laid out
again are compared with the buffer's, not written), and every view of it ends at or before
`used` when it is made; `used` only grows. So a turn costs its new tokens, not a copy of
the prompt's arrays, and two turns' ids sharing a buffer are equal up to the shorter one
without comparing them (`common_prefix_length`).
"""

from __future__ import annotations

import functools
import re
import sqlite3
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import xxhash

from prefixscope.model import Request
from prefixscope.prompt import Prompt, RenderOptions, Segment, render
from prefixscope.tokenizers import Encoded, Tokenizer, load_tokenizer
from prefixscope.tokenizers.boundaries import chunk_safe_text

DEFAULT_MAX_TOKENS = 20_000_000  # piece-cache capacity per tokenizer (about 160 MB)
# A new piece is looked up in chunks of at least this many characters, cut at about one
# in `CHUNK_EVERY` of the line starts the tokenizer always cuts at (`PieceCache._chunks`).
CHUNK_MIN = 512
# 8 -> 4: a billing header's new hash re-tokenizes 130 tokens of the head, not 400 (the
# report's heads, 0.27 GiB: 15.5/13.8 -> 13.2/12.9 s CPU in two alternating runs)
CHUNK_EVERY = 4

# A text that runs on as its session's previous one after differing from it is taken from
# that one's ids for a run at least this long (`PieceCache._middle`).
MIDDLE_MIN = 4096

# start of each piece of a text, and its piece-cache key or a split token's (ids, starts):
# each entry's token starts are its starts plus its start (`PieceCache._assemble`)
_Layout = tuple[list[int], list["int | tuple[np.ndarray, np.ndarray]"]]
# a run of a text equal to a run of the previous one: (start in the text, start in the
# previous one, length)
_Middle = tuple[int, int, int]


# How far back from its end `PieceCache._last_split_end` first looks (characters).
_SPLIT_WINDOW = 4096

# A session's buffer (`_Run`) is made this much longer than the turn that makes it (a
# quarter: a turn adds a few percent to its prompt, so a buffer takes several turns).
_RUN_ROOM = 4


@dataclass(slots=True, eq=False)
class _Run:
    """What is written of a session's buffers of token ids and starts, which have room to
    grow: each turn's arrays are read-only views of their first entries (module doc).
    Invariant: no entry before `used` is ever written again, and every view handed out
    ends at or before `used`. The buffers are held by their views alone (weakly here):
    a session's buffer goes with its last turn held."""

    ids: weakref.ref[np.ndarray]
    starts: weakref.ref[np.ndarray]
    used: int = 0


@dataclass(frozen=True, slots=True)
class Tokens:
    """A request's prompt as token ids, with the segment each token belongs to."""

    ids: np.ndarray  # uint32 token ids
    char_starts: np.ndarray  # int64: offset in prompt.text of each token's first char
    prompt: Prompt  # the rendered prompt these ids spell
    options: RenderOptions  # gateway, tokenizer and what-ifs used
    # the prompt tokens the log reports for the request (usage.prompt_tokens; None when
    # not logged, or when tokenized from a Prompt alone)
    logged_prompt_tokens: int | None = None

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def unrebuilt_tokens(self) -> int | None:
        """Logged prompt tokens the rebuilt prompt lacks: ``max(0, logged - len(ids))``.

        A log that does not hold the whole request (no tool list, no base instructions,
        encrypted reasoning: the request's `metadata.approximate` says which) renders
        shorter than what was sent; this is how much shorter, counted with this
        tokenizer. None when the log reports no prompt tokens.
        """
        if self.logged_prompt_tokens is None:
            return None
        return max(0, self.logged_prompt_tokens - len(self.ids))

    @property
    def segment_index(self) -> np.ndarray:
        """int32: the index into prompt.segments of each token's first character. Made
        when asked (an array as long as the prompt: diff and the replays of a long
        session's turns never read it)."""
        return _segment_index(self.prompt, self.char_starts)

    def segment(self, token: int) -> Segment:
        """The segment holding token `token`'s first character."""
        return self.prompt.segments[int(self.segment_index[token])]

    def segment_token_spans(self) -> list[tuple[int, int]]:
        """[token_start, token_end) of each segment (empty when no token starts in it)."""
        bounds = np.array([s.char_start for s in self.prompt.segments] + [len(self.prompt.text)],
                          dtype=np.int64)
        edges = np.searchsorted(self.char_starts, bounds, side="left")
        return [(int(edges[i]), int(edges[i + 1])) for i in range(len(self.prompt.segments))]


_SPLIT_CACHE: dict[tuple[str, str], tuple[str, ...]] = {}


def split_tokens(tok: Tokenizer) -> tuple[str, ...]:
    """Added tokens a prompt of this tokenizer's template may be split at (see module doc)."""
    key = (getattr(tok, "identity", ""), tok.chat_template)
    if key[0] and key in _SPLIT_CACHE:
        return _SPLIT_CACHE[key]
    found = _find_split_tokens(tok)
    if key[0]:
        _SPLIT_CACHE[key] = found
    return found


def _find_split_tokens(tok: Tokenizer) -> tuple[str, ...]:
    if not tok.piece_safe:
        return ()
    contents = [t.content for t in tok.added_tokens]
    by_last: dict[str, list[str]] = {}
    for t in contents:
        if t:
            by_last.setdefault(t[-1], []).append(t)
    any_single_word = any(t.single_word for t in tok.added_tokens)
    used = tok.chat_template + "\0" + "\0".join(
        v for v in tok.template_vars.values() if isinstance(v, str))
    out = []
    for token in tok.added_tokens:
        s = token.content
        if not s or s not in used:
            continue
        if token.lstrip or token.rstrip or token.single_word:
            continue
        if token.normalized and not tok.identity_normalizer:
            continue
        if any_single_word and (s[0].isalnum() or s[-1].isalnum() or "_" in (s[0], s[-1])):
            continue
        if _covered(s, contents, by_last):
            continue
        out.append(s)
    return tuple(sorted(set(out), key=lambda t: (-len(t), t)))


def _covered(s: str, contents: list[str], by_last: dict[str, list[str]]) -> bool:
    """Could a match of another added token T cover part of an occurrence of `s`?

    T contains `s`, or a proper suffix of T is a proper prefix ``s[:k]`` of `s` -- then
    T ends with ``s[k - 1]``, so only the tokens ending with that character (`by_last`)
    are compared (a vocabulary has a thousand added tokens; most end alike).
    """
    if any(s in t for t in contents if t != s):
        return True
    return any(t != s and t.endswith(s[:k])
               for k in range(1, len(s)) for t in by_last.get(s[k - 1], ()))


class PieceCache:
    """Token ids of prompt pieces, tokenized once per distinct piece (per tokenizer)."""

    def __init__(self, tokenizer: Tokenizer, *, max_tokens: int = DEFAULT_MAX_TOKENS,
                 persist: str | Path | None = None, chunk_min: int = CHUNK_MIN,
                 chunk_every: int = CHUNK_EVERY, middle_min: int = MIDDLE_MIN) -> None:
        """Args:
            tokenizer: the tokenizer every piece is encoded with.
            max_tokens: in-memory capacity; the least recently used pieces are dropped
                beyond it.
            persist: a SQLite file to also read and write pieces (None: memory only).
            chunk_min, chunk_every: how new pieces are cut into chunks (`_chunks`); the
                ids are the same whatever they are.
            middle_min: the shortest run of a previous text taken whole (`_middle`); the
                ids are the same whatever it is.
        """
        self.tokenizer = tokenizer
        self.chunk_min = max(1, chunk_min)
        self.chunk_every = max(1, chunk_every)
        self.middle_min = max(1, middle_min)
        self.seed = xxhash.xxh3_64_intdigest(tokenizer.identity.encode())
        self.max_tokens = max_tokens
        self.splitters = split_tokens(tokenizer)
        self._split_re = (re.compile("|".join(map(re.escape, self.splitters)))
                          if self.splitters else None)
        self._special_ids = tokenizer.added_token_ids
        self._split_ids = frozenset(self._special_ids[s] for s in self.splitters)
        self._longest_split = max(map(len, self.splitters), default=0)
        # (ids, relative starts) of each split token, built once instead of per occurrence.
        self._special_pairs: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._pieces: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._stored_tokens = 0
        # the `_Run` of each buffer alive, by the id of its ids buffer (`_run_of`)
        self._runs: dict[int, _Run] = {}
        self.hits = 0  # pieces found in the cache
        self.misses = 0  # pieces tokenized
        self.tokens_encoded = 0  # tokens produced by the tokenizer (misses only)
        self.chunk_hits = 0  # chunks of new pieces found in the cache
        self._db: sqlite3.Connection | None = None
        if persist is not None:
            self._db = sqlite3.connect(str(persist))
            self._db.execute("CREATE TABLE IF NOT EXISTS pieces (key BLOB PRIMARY KEY, "
                             "ids BLOB NOT NULL, starts BLOB NOT NULL)")

    @property
    def split_ids(self) -> frozenset[int]:
        """The ids of the split tokens (`split_tokens`)."""
        return self._split_ids

    def pieces(self, text: str) -> Iterator[tuple[int, int, bool]]:
        """(start, end, is_split_token) of the pieces of `text`, in order."""
        pos = 0
        if self._split_re is not None:
            for match in self._split_re.finditer(text):
                if match.start() > pos:
                    yield pos, match.start(), False
                yield match.start(), match.end(), True
                pos = match.end()
        if pos < len(text):
            yield pos, len(text), False

    def encode(self, text: str) -> Encoded:
        """Ids and token starts of `text`, identical to ``tokenizer.encode(text)``."""
        return self.encode_many([text])[0]

    def encode_many(self, texts: list[str],
                    previous: list[tuple[str, Encoded | int, int] | None] | None = None
                    ) -> list[Encoded]:
        """`encode` of several texts; their new pieces are tokenized in one parallel batch.

        `previous[i]`, when given: ``(text, its ids or the index j < i of it in `texts`,
        characters known equal)`` of a text `texts[i]` probably starts with (its session's
        previous prompt): the ids up to the last split token inside the shared start are
        taken from it (module doc). The result is the same either way.
        """
        wanted: dict[int, str] = {}
        # (cut, the previous text's ids or index, the layout from the cut, the middle and
        # the layout after it)
        plans: list[tuple[int, Encoded | int | None, _Layout,
                          tuple[_Middle, _Layout] | None]] = []
        for i, text in enumerate(texts):
            before = previous[i] if previous is not None else None
            cut, middle = 0, None
            if before is not None and self.splitters:
                shared = common_text_prefix(before[0], text, before[2])
                cut = self._last_split_end(before[0], shared)
                middle = self._middle(before[0], text, shared)
            if middle is None:
                plans.append((cut, before[1] if before is not None and cut else None,
                              self._layout(text, wanted, cut), None))
                continue
            assert before is not None
            plans.append((cut, before[1], self._layout(text, wanted, cut, middle[0]),
                          (middle, self._layout(text, wanted, middle[0] + middle[2]))))
        self._fill(wanted)
        out: list[Encoded] = []
        for cut, base, layout, then in plans:
            head = (out[base] if isinstance(base, int) else base) if base is not None else None
            if then is not None and head is not None:
                layout = self._with_middle(layout, *then, head)
            # the previous text's tokens before `cut`: it is a token boundary there
            k = int(np.searchsorted(head.starts, cut, side="left")) \
                if head is not None and cut else 0
            out.append(self._assemble(layout, head, k))
        self._evict()  # NOTE: only now -- the layouts above needed every piece they name
        return out

    def _last_split_end(self, text: str, end: int, start: int = 0) -> int:
        """End of the last split-token occurrence inside ``text[start:end]`` (`start`:
        none).

        Looked for in the last `_SPLIT_WINDOW` characters first: an occurrence that
        starts before the window ends before its start plus the longest split token, so
        one found ending at or after that is the last (else the whole range is read)."""
        def last_end(lo: int) -> int:
            return max((at + len(s) for s in self.splitters
                        if (at := text.rfind(s, lo, end)) >= 0), default=lo)

        lo = max(start, end - _SPLIT_WINDOW)
        if lo > start and (found := last_end(lo)) >= lo + self._longest_split:
            return found
        return last_end(start)

    def _middle(self, before: str, text: str, shared: int) -> _Middle | None:
        """Where `text`, past the first place it differs from `before` (`shared`), runs on
        as `before` does: (its start in `text`, in `before`, its length), both ends at
        split-token occurrences in both texts, at least `middle_min` characters; None where
        there is no such run.

        A session's turn whose head changed (a billing header with a new hash, in the
        system prompt) differs from the last turn in a few characters, then goes on with
        that turn's whole history: its ids are that history's ids, taken whole here, not
        laid out piece by piece. Why exact: both ends are occurrences of a split token, so
        (module doc) each text's tokenization splits at both, and the ids of the run are
        those of its characters alone -- the same characters in both texts."""
        split = self._split_re
        assert split is not None
        found_before = split.search(before, shared)
        found_text = split.search(text, shared)
        if found_before is None or found_text is None or \
                found_before.group() != found_text.group():
            return None
        start_before, start_text = found_before.start(), found_text.start()
        same = common_run(before, start_before, text, start_text)
        if same < self.middle_min:
            return None
        length = self._last_split_end(before, start_before + same, start_before) - start_before
        return (start_text, start_before, length) if length >= self.middle_min else None

    @staticmethod
    def _with_middle(layout: _Layout, middle: _Middle, after: _Layout,
                     before: Encoded) -> _Layout:
        """`layout`, then the middle's ids taken from `before`'s, then `after`."""
        start_text, start_before, length = middle
        first, last = np.searchsorted(before.starts, (start_before, start_before + length),
                                      side="left")
        # views of `before`'s arrays (no copy), its starts moved by the run's offset
        taken = (before.ids[first:last], before.starts[first:last])
        return ([*layout[0], start_text - start_before, *after[0]],
                [*layout[1], taken, *after[1]])

    def _layout(self, text: str, wanted: dict[int, str], pos: int = 0,
                end: int | None = None) -> _Layout:
        """(start of each piece, piece key or the (ids, starts) of a split token) of
        `text` from `pos` to `end` (split points; None: its end)."""
        end = len(text) if end is None else end
        starts: list[int] = []
        entries: list[int | tuple[np.ndarray, np.ndarray]] = []
        if self._split_re is not None:
            for match in self._split_re.finditer(text, pos, end):
                at = match.start()
                if at > pos:
                    pos = self._add_piece(text[pos:at], pos, starts, entries, wanted)
                starts.append(at)
                entries.append(self._special_pair(match.group()))
                pos = match.end()
        if pos < end:
            self._add_piece(text[pos:end], pos, starts, entries, wanted)
        return starts, entries

    def _add_piece(self, piece: str, start: int, starts: list[int],
                   entries: list[int | tuple[np.ndarray, np.ndarray]],
                   wanted: dict[int, str]) -> int:
        key = xxhash.xxh3_128_intdigest(piece.encode("utf-8", "surrogatepass"), seed=self.seed)
        starts.append(start)
        entries.append(key)
        if key in self._pieces:
            self._pieces[key] = self._pieces.pop(key)  # the most recently used goes last
            self.hits += 1
        elif key not in wanted:
            wanted[key] = piece
        else:
            self.hits += 1
        return start + len(piece)

    def _special_pair(self, content: str) -> tuple[np.ndarray, np.ndarray]:
        pair = self._special_pairs.get(content)
        if pair is None:
            pair = self._special_pairs[content] = (
                np.array([self._special_ids[content]], dtype=np.uint32),
                np.zeros(1, dtype=np.int32))
        return pair

    def _assemble(self, layout: _Layout, before: Encoded | None = None, k: int = 0
                  ) -> Encoded:
        """The ids and starts of `before`'s first `k` tokens, then of `layout`'s entries
        (each entry's starts moved by its start), written once into arrays of their
        whole length: a session's turn is its previous turn's tokens and a few new ones,
        so this is a copy of the prompt's arrays, not several (concatenating the
        entries, widening their starts, adding the offsets, then the previous tokens
        before them each made another whole-prompt array).

        Where `before` is the last turn written to its buffers and the turn goes on
        from it, nothing is copied: the new entries are written after it. That is so at
        k = |before| (the previous prompt ends with a split token), and at a smaller k
        whose re-laid-out tokens are `before`'s last ones again (o200k-harmony's prompts
        end with ``<|start|>assistant``, whose ``assistant`` is laid out again with what
        follows it): those entries are written aside, compared with the buffer's, and
        only the ones past `before` written to it -- so no entry a view reads changes."""
        starts, entries = layout
        pieces = self._pieces
        pairs = [pieces[e] if isinstance(e, int) else e for e in entries]
        id_arrays = [pair[0] for pair in pairs]
        lengths = np.fromiter(map(len, id_arrays), dtype=np.int64, count=len(id_arrays))
        total = k + int(lengths.sum())
        kinds = id_arrays + ([before.ids] if before is not None and k else [])  # (uint32)
        dtype = np.result_type(*kinds) if kinds else np.dtype(np.uint32)
        # `before` whole, the last turn written to its buffers: this turn may append to it
        found = self._run_of(before) if before is not None and k else None
        if found is not None and not (found[1].dtype == dtype and len(found[1]) >= total and
                                      k <= found[0].used <= total):
            found = None
        tail = None
        if found is not None and k < found[0].used:
            tail = _goes_on(found, pairs, starts, k, total, dtype)
            if tail is None:
                found = None
        if found is not None:
            run, ids, out = found
        else:
            ids = np.empty(total + total // _RUN_ROOM, dtype)
            out = np.empty(total + total // _RUN_ROOM, np.int64)
            run = _Run(weakref.ref(ids), weakref.ref(out))
            self._runs[id(ids)] = run
            weakref.finalize(ids, self._runs.pop, id(ids), None)
            if before is not None and k:
                ids[:k] = before.ids[:k]
                out[:k] = before.starts[:k]
        if tail is not None:  # the entries past `used`, written aside by `_goes_on`
            ids[run.used:total], out[run.used:total] = tail
        elif pairs:
            _write(pairs, starts, ids[k:total], out[k:total])
        run.used = total  # (`used` <= total: only entries past the old `used` were written)
        ids, out = ids[:total], out[:total]
        ids.flags.writeable = False
        out.flags.writeable = False
        return Encoded(ids, out)

    def _run_of(self, encoded: Encoded) -> tuple[_Run, np.ndarray, np.ndarray] | None:
        """(the `_Run`, its ids and starts buffers) where `encoded`'s arrays are views of
        all that is written of them (from their start to `used`); else None. Only then may
        a turn be appended in place: past `used` no view reads."""
        ids, starts = encoded.ids.base, encoded.starts.base
        if not (isinstance(ids, np.ndarray) and isinstance(starts, np.ndarray)):
            return None
        run = self._runs.get(id(ids))
        if run is None or run.ids() is not ids or run.starts() is not starts or \
                len(encoded.ids) != run.used or len(encoded.starts) != run.used or \
                not _starts_at(encoded.ids, ids) or not _starts_at(encoded.starts, starts):
            return None
        return run, ids, starts

    def _fill(self, wanted: dict[int, str]) -> None:
        if not wanted:
            return
        if self._db is not None:
            for key in list(wanted):
                row = self._db.execute("SELECT ids, starts FROM pieces WHERE key = ?",
                                       (key.to_bytes(16, "big"),)).fetchone()
                if row is not None:
                    self._store(key, np.frombuffer(row[0], dtype=np.uint32),
                                np.frombuffer(row[1], dtype=np.int32))
                    del wanted[key]
        # A piece long enough is looked up by chunks (`_chunks`): only the new ones are
        # tokenized, and the piece is their tokens end to end.
        todo: dict[int, str] = {}
        chunked: list[tuple[int, list[tuple[int, int]]]] = []  # piece key, (start, chunk key)
        for key, text in wanted.items():
            chunks = self._chunks(text)
            if chunks is None:
                todo[key] = text
                continue
            chunked.append((key, chunks))
            ends = [start for start, _ in chunks[1:]] + [len(text)]
            for (start, chunk), end in zip(chunks, ends, strict=True):
                if chunk in self._pieces:
                    self._pieces[chunk] = self._pieces.pop(chunk)
                    self.chunk_hits += 1
                elif chunk in todo:
                    self.chunk_hits += 1
                else:
                    todo[chunk] = text[start:end]
        keys = list(todo)
        encoded = self.tokenizer.encode_many([todo[k] for k in keys])
        for key, enc in zip(keys, encoded, strict=True):
            rel = enc.starts.astype(np.int32)
            self._store(key, enc.ids, rel)
            self.misses += 1
            self.tokens_encoded += len(enc.ids)
            if self._db is not None:
                self._db.execute("INSERT OR REPLACE INTO pieces VALUES (?, ?, ?)",
                                 (key.to_bytes(16, "big"), enc.ids.tobytes(), rel.tobytes()))
        for key, chunks in chunked:
            parts = [self._pieces[chunk] for _, chunk in chunks]
            ids = np.concatenate([part[0] for part in parts])
            lengths = np.fromiter((len(part[0]) for part in parts), dtype=np.int64,
                                  count=len(parts))
            offsets = np.fromiter((start for start, _ in chunks), dtype=np.int32,
                                  count=len(chunks))
            rel = np.concatenate([part[1] for part in parts]) + np.repeat(offsets, lengths)
            self._store(key, ids, rel)
        if self._db is not None:
            self._db.commit()

    def _chunks(self, text: str) -> list[tuple[int, int]] | None:
        """(start, cache key) of each chunk of `text`, cut where the tokenizer provably
        always cuts (`tokenizers.boundaries`); None: tokenized whole (short, no boundary
        proved, no cut found).

        Which boundaries are cuts depends on the text after them alone (a hash of the line
        they start, and at least `chunk_min` characters since the last cut and before the
        end), so after an edit the cuts fall where they fell before it, and the chunks after
        the edit are found again."""
        boundary, least = self.tokenizer.chunk_boundary, self.chunk_min
        if boundary is None or len(text) < 2 * least or \
                not chunk_safe_text(text, self.tokenizer.nfc):
            return None
        cuts = [0]
        # The boundaries in order, each `least` past the last cut: after a cut the search
        # resumes that far on (a boundary's lookbehind reads the text before it).
        stop, at = len(text) - least + 1, least
        breaks = _after_break(boundary)
        while (match := boundary.search(text, at, stop) if breaks is None else
               breaks.search(text, at - 1, stop)) is not None:
            at = match.start() if breaks is None else match.end()
            if xxhash.xxh32_intdigest(text[at:at + 32].encode("utf-8", "surrogatepass")) \
                    % self.chunk_every:
                at += 1
            else:
                cuts.append(at)
                at += least
        if len(cuts) == 1:
            return None
        ends = [*cuts[1:], len(text)]
        return [(start, xxhash.xxh3_128_intdigest(
                    text[start:end].encode("utf-8", "surrogatepass"), seed=self.seed))
                for start, end in zip(cuts, ends, strict=True)]

    def _store(self, key: int, ids: np.ndarray, rel: np.ndarray) -> None:
        self._pieces[key] = (ids, rel)
        self._stored_tokens += len(ids)

    def _evict(self) -> None:
        """Drop the least recently used pieces beyond capacity (the dict's order: a piece
        found is moved to its end)."""
        while self._stored_tokens > self.max_tokens and len(self._pieces) > 1:
            oldest = next(iter(self._pieces))
            self._stored_tokens -= len(self._pieces.pop(oldest)[0])

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


@dataclass
class _Caches:
    by_identity: dict[str, PieceCache] = field(default_factory=dict)
    max_tokens: int = DEFAULT_MAX_TOKENS  # the capacity of the caches made from now on


_CACHES = _Caches()


def piece_cache(tokenizer: Tokenizer) -> PieceCache:
    """The process-wide piece cache of `tokenizer` (created on first use)."""
    cache = _CACHES.by_identity.get(tokenizer.identity)
    if cache is None:
        cache = _CACHES.by_identity[tokenizer.identity] = PieceCache(
            tokenizer, max_tokens=_CACHES.max_tokens)
    return cache


def limit_piece_caches(max_tokens: int) -> None:
    """The capacity of this process's piece caches (those made already too): a worker
    that walks runs of a few sessions at a time needs the pieces of those, not the
    20M tokens one process walking a whole log in time order may need."""
    _CACHES.max_tokens = max_tokens
    for cache in _CACHES.by_identity.values():
        cache.max_tokens = max_tokens
        cache._evict()


def tokenize_prompt(prompt: Prompt, options: RenderOptions, cache: PieceCache | None = None
                    ) -> Tokens:
    """Token ids and per-token segments of an already rendered prompt."""
    tok = load_tokenizer(prompt.tokenizer)
    cache = cache if cache is not None else piece_cache(tok)
    return _with_segments(prompt, cache.encode(prompt.text), options)


def tokens_many(requests: list[Request], options: RenderOptions | None = None, *,
                cache: PieceCache | None = None) -> list[Tokens]:
    """`tokens` of several requests; their new pieces are tokenized as one parallel batch.

    Same results as calling `tokens` on each; faster on several cores. Raises like `tokens`.
    """
    options = options or RenderOptions()
    prompts = [render(request, options) for request in requests]
    encoded: list[Encoded | None] = [None] * len(prompts)
    by_tokenizer: dict[str, list[int]] = {}
    for i, prompt in enumerate(prompts):  # with --tokenizer auto, models may differ
        by_tokenizer.setdefault(prompt.tokenizer, []).append(i)
    for spec, indexes in by_tokenizer.items():
        group_cache = cache if cache is not None else piece_cache(load_tokenizer(spec))
        for i, enc in zip(indexes, group_cache.encode_many([prompts[i].text for i in indexes]),
                          strict=True):
            encoded[i] = enc
    return [_with_segments(p, enc, options, r.usage.prompt_tokens)
            for r, p, enc in zip(requests, prompts, encoded, strict=True) if enc is not None]


def _with_segments(prompt: Prompt, enc: Encoded, options: RenderOptions,
                   logged: int | None = None) -> Tokens:
    return Tokens(enc.ids, enc.starts, prompt, options, logged)


_LINE_BREAK_BEHIND = r"(?<=[\r\n])"


@functools.cache
def _after_break(boundary: re.Pattern[str]) -> re.Pattern[str] | None:
    """For a boundary ``(?<=[\\r\\n])X`` (every one `tokenizers.boundaries` proves), the
    line break before it: ``[\\r\\n](?=X)``, whose match ends where a boundary is.
    Python's engine tries a look-behind at every character; a pattern opening with a
    class is scanned for that class first (the chunk cuts of the bench's raw captures:
    0.14 -> 0.07 s). The same places: a boundary at p is a line break at p - 1 and X
    matching at p, which is this match at p - 1, so a search of this one from ``at - 1``
    finds the first boundary from ``at``, with the same end of the text. None: another
    form, searched as it is (an alternation too: in ``(?<=[\r\n])A|B`` the look-behind
    holds for ``A`` only, where the look-ahead would require the break before ``B`` as
    well)."""
    if not boundary.pattern.startswith(_LINE_BREAK_BEHIND):
        return None
    rest = boundary.pattern[len(_LINE_BREAK_BEHIND):]
    if "|" in rest:
        return None
    return re.compile(rf"[\r\n](?={rest})", boundary.flags)


def _segment_index(prompt: Prompt, starts: np.ndarray) -> np.ndarray:
    """`Tokens.segment_index` of a prompt's tokens starting at `starts`."""
    seg_starts = np.fromiter((s.char_start for s in prompt.segments), dtype=np.int64,
                             count=len(prompt.segments))
    if not (_non_decreasing(starts) and _non_decreasing(seg_starts)):
        index = np.searchsorted(seg_starts, starts, side="right") - 1
        return index.astype(np.int32)
    # Token starts are sorted: the tokens of segment i are those from the first token at
    # or after its start up to the first at or after the next segment's start. This
    # equals searchsorted(seg_starts, starts, side="right") - 1, in O(tokens + segments).
    edges = np.searchsorted(starts, seg_starts, side="left")
    counts = np.diff(edges, prepend=0, append=len(starts))
    return np.repeat(np.arange(-1, len(seg_starts), dtype=np.int32), counts)


def _non_decreasing(values: np.ndarray) -> bool:
    return len(values) < 2 or bool(np.all(values[1:] >= values[:-1]))


def tokens(request: Request, options: RenderOptions | None = None, *,
           cache: PieceCache | None = None) -> Tokens:
    """Render `request` and tokenize it with the model's tokenizer, exactly and fast.

    Args:
        request: a request with a body.
        options: gateway profile, tokenizer spec, what-if transforms.
        cache: a piece cache to use (default: the process-wide one of the tokenizer).

    Returns:
        `Tokens`: ids (uint32), segment index and start offset of every token, the
        `Prompt`, and the options.

    Raises:
        RenderError: the request cannot be rendered (see `render`).
        TokenizerError: the tokenizer cannot be loaded offline.
    """
    options = options or RenderOptions()
    prompt = render(request, options)
    tok = load_tokenizer(prompt.tokenizer)
    cache = cache if cache is not None else piece_cache(tok)
    return _with_segments(prompt, cache.encode(prompt.text), options, request.usage.prompt_tokens)


def common_text_prefix(a: str, b: str, known: int = 0) -> int:
    """How many leading characters `a` and `b` share (the first `known` are known equal)."""
    lo = min(known, len(a), len(b))
    return lo + common_run(a, lo, b, lo)


def common_run(a: str, i: int, b: str, j: int) -> int:
    """How many leading characters ``a[i:]`` and ``b[j:]`` share, neither sliced whole:
    compared a block at a time from the start, each block four times the last (a turn
    whose head changed differs in its first block: little is read), then the differing
    block halved; each step one comparison of two slices in C. Equal texts are read once,
    as one comparison of the whole would read them."""
    n = min(len(a) - i, len(b) - j)
    lo, block = 0, _FIRST_TEXT_BLOCK
    starts = a.startswith  # a.startswith(b[p:q], i + p): a[i + p:i + q] == b[p:q], q - p <= n
    while True:  # a[i:i + lo] == b[j:j + lo]
        if lo >= n:
            return n
        hi = min(n, lo + block)
        if not starts(b[j + lo:j + hi], i + lo):
            break  # the first difference is in [lo, hi)
        lo, block = hi, block * 4
    while hi - lo > 64:
        mid = (lo + hi) // 2
        if starts(b[j + lo:j + mid], i + lo):
            lo = mid
        else:
            hi = mid
    while lo < hi and a[i + lo] == b[j + lo]:
        lo += 1
    return lo


_FIRST_TEXT_BLOCK = 256  # characters compared first by `common_run`


def _goes_on(found: tuple[_Run, np.ndarray, np.ndarray],
             pairs: list[tuple[np.ndarray, np.ndarray]], starts: list[int], k: int,
             total: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray] | None:
    """The entries' tokens past the buffer's `used` (ids and starts, written aside by
    `_write`), when their tokens from token k to `used` are the buffer's there; else None
    (`PieceCache._assemble`).

    Compared entry by entry, each against the buffer's tokens it covers, before anything
    is written: a turn whose head changed (a billing header) differs in its first
    entries and is refused there, not after its whole prompt (its history's run taken
    whole) was written aside and compared."""
    run, ids, out = found
    seen = run.used - k  # (<= the entries' tokens: `used` <= total)
    at = i = cut = 0
    while at < seen:  # ids[k:k + at] and out[k:k + at] are pairs[:i]'s
        entry_ids, rel = pairs[i]
        n = min(len(entry_ids), seen - at)
        if not (np.array_equal(entry_ids[:n], ids[k + at:k + at + n]) and
                np.array_equal(np.add(rel[:n], starts[i], dtype=np.int64),
                               out[k + at:k + at + n])):
            return None
        if n < len(entry_ids):  # the entry goes on past `used`: its rest is written
            cut = n
            break
        at += n
        i += 1
    rest = [(pairs[i][0][cut:], pairs[i][1][cut:]), *pairs[i + 1:]] if cut else pairs[i:]
    if not rest:
        return np.empty(0, dtype), np.empty(0, np.int64)
    new_ids = np.empty(total - run.used, dtype)
    new_starts = np.empty(total - run.used, np.int64)
    _write(rest, starts[i:], new_ids, new_starts)
    return new_ids, new_starts


def _write(pairs: list[tuple[np.ndarray, np.ndarray]], starts: list[int],
           ids: np.ndarray, out: np.ndarray) -> None:
    """Each entry's ids, and its starts moved by its start, end to end into `ids` and
    `out` (as long as the entries together) in one pass."""
    np.concatenate([pair[0] for pair in pairs], out=ids)
    at = 0
    for (_, rel), start in zip(pairs, starts, strict=True):
        end = at + len(rel)
        np.add(rel, start, out=out[at:end], dtype=np.int64)
        at = end


def common_prefix_length(a: np.ndarray, b: np.ndarray) -> int:
    """How many leading token ids `a` and `b` share.

    Two turns of a session whose ids are views of one buffer from its start (`_Run`) are
    the same memory up to the shorter one: equal without a comparison. Else compared a
    block at a time, each four times the last: a prompt whose head changed differs in
    its first block, and no id is read twice."""
    n = min(len(a), len(b))
    if n and a.dtype == b.dtype and a.dtype.kind in "iub" and _starts_at(a, b):
        return n  # the same integers in the same memory (both alive: nothing reused it)
    lo, block = 0, _FIRST_BLOCK
    while lo < n:
        hi = min(n, lo + block)
        differ = a[lo:hi] != b[lo:hi]
        first = int(differ.argmax())  # the first True, or 0 where none is
        if differ[first]:
            return lo + first
        lo, block = hi, block * 4
    return n


_FIRST_BLOCK = 4096  # ids compared first by `common_prefix_length`


def _starts_at(a: np.ndarray, b: np.ndarray) -> bool:
    """Do `a` and `b` start at the same address with the same steps (so their first
    ``min(len)`` elements are the same memory)?"""
    return a.__array_interface__["data"][0] == b.__array_interface__["data"][0] and \
        a.strides == b.strides
