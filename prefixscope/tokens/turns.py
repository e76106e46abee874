"""Tokens of a session's requests, each rendered and tokenized once, from its predecessor's.

diff, simulate's prepare and report walk a session's requests in order, and each request
is the previous one plus a turn. `Turns` renders a request from what its predecessor's
render left (`prompt.render_turn`: only the new messages through the chat template, when
the template's splice is proven) and tokenizes it from its predecessor's ids up to the
last split token they share (`PieceCache.encode_many`'s ``previous``). Each result is the
one `tokens_many` gives for the request alone (tests/test_splice.py, tests/test_turns.py).

Lifetime: a request's state (its render's `Turn` and its `Tokens`) is held from its
tokenization until the caller says no later request will name it as predecessor
(`forget`, `keep_only`), so memory follows the sessions open at once, not the log.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from prefixscope.model import Request
from prefixscope.prompt import Prompt, RenderError, RenderOptions
from prefixscope.prompt.pipeline import Turn, render_turn
from prefixscope.prompt.splice import heads_split
from prefixscope.tokenizers import Encoded, load_tokenizer
from prefixscope.tokens.tokenize import PieceCache, Tokens, _with_segments, piece_cache


@dataclass(frozen=True, slots=True)
class Held:
    """What a tokenized request leaves for the next request of its session."""

    turn: Turn | None  # None: its template has no splice, or its render cannot seed one
    tokens: Tokens


class Turns:
    """Requests rendered and tokenized with one `RenderOptions`, each from the state its
    session predecessor left (see the module doc)."""

    def __init__(self, options: RenderOptions, cache: PieceCache | None = None) -> None:
        self.options = options
        self.cache = cache
        self.held: dict[str, Held] = {}

    def tokens_many(self, requests: Sequence[Request], previous: Sequence[str | None]
                    ) -> list[Tokens | RenderError]:
        """`Tokens` of each request (or the `RenderError` it raised), `previous[i]` naming
        its session predecessor (None: none). A predecessor held here, or earlier in
        `requests`, is read; every request tokenized is held until forgotten.

        Raises:
            TokenizerError: the tokenizer cannot be loaded offline.
        """
        rendered: list[tuple[Prompt, Turn | None] | RenderError] = []
        place: dict[str, int] = {}  # request id -> its index in `requests`
        for i, (request, prev) in enumerate(zip(requests, previous, strict=True)):
            before = self._turn_of(prev, place, rendered)  # `place`: the earlier ones only
            try:
                rendered.append(render_turn(request, self.options, before))
            except RenderError as exc:
                rendered.append(exc)
            place[request.id] = i
        encoded = self._encode(requests, previous, rendered, place)
        out: list[Tokens | RenderError] = []
        for request, result, enc in zip(requests, rendered, encoded, strict=True):
            if isinstance(result, RenderError):
                out.append(result)
                continue
            assert enc is not None  # every rendered prompt was encoded
            prompt, turn = result
            tokens = _with_segments(prompt, enc, self.options, request.usage.prompt_tokens)
            self.held[request.id] = Held(turn, tokens)
            out.append(tokens)
        return out

    def _turn_of(self, prev: str | None, place: dict[str, int],
                 rendered: list[tuple[Prompt, Turn | None] | RenderError]) -> Turn | None:
        if prev is None:
            return None
        if prev in place:
            found = rendered[place[prev]]
            return None if isinstance(found, RenderError) else found[1]
        held = self.held.get(prev)
        return held.turn if held is not None else None

    def _encode(self, requests: Sequence[Request], previous: Sequence[str | None],
                rendered: list[tuple[Prompt, Turn | None] | RenderError],
                place: dict[str, int]) -> list[Encoded | None]:
        """The ids of every rendered prompt, grouped by tokenizer (with ``--tokenizer
        auto`` models may differ), each from its predecessor's when they share one."""
        encoded: list[Encoded | None] = [None] * len(requests)
        groups: dict[str, list[int]] = {}
        for i, result in enumerate(rendered):
            if not isinstance(result, RenderError):
                groups.setdefault(result[0].tokenizer, []).append(i)
        for spec, indexes in groups.items():
            cache = self.cache if self.cache is not None else piece_cache(load_tokenizer(spec))
            at = {i: k for k, i in enumerate(indexes)}
            texts, bases = [], []
            for i in indexes:
                prompt = rendered[i][0]  # type: ignore[index]
                texts.append(prompt.text)
                bases.append(self._base(i, previous[i], prompt, place, rendered, at))
            for i, enc in zip(indexes, cache.encode_many(texts, bases), strict=True):
                encoded[i] = enc
        return encoded

    def _base(self, i: int, prev: str | None, prompt: Prompt, place: dict[str, int],
              rendered: list[tuple[Prompt, Turn | None] | RenderError], at: dict[int, int]
              ) -> tuple[str, Encoded | int, int] | None:
        """(text, ids or index in the group, characters known equal) of the predecessor's
        prompt, when it was counted with the same tokenizer."""
        if prev is None:
            return None
        if prev in place and place[prev] < i:  # earlier in this batch: its ids come first
            found = rendered[place[prev]]
            if isinstance(found, RenderError) or place[prev] not in at or \
                    found[0].tokenizer != prompt.tokenizer:
                return None
            return found[0].text, at[place[prev]], self._kept(rendered[i])
        held = self.held.get(prev) if prev not in place else None
        if held is None or held.tokens.prompt.tokenizer != prompt.tokenizer:
            return None
        return held.tokens.prompt.text, Encoded(held.tokens.ids, held.tokens.char_starts), \
            self._kept(rendered[i])

    @staticmethod
    def _kept(rendered: tuple[Prompt, Turn | None] | RenderError) -> int:
        """Leading characters of a render known to be its predecessor's (`Turn.kept`: the
        render was spliced onto the predecessor's `Turn`, whose prompt is the one held)."""
        turn = None if isinstance(rendered, RenderError) else rendered[1]
        return turn.kept if turn is not None else 0

    def get(self, request_id: str) -> Tokens | None:
        """The held tokens of a request (None: not tokenized here, or forgotten)."""
        held = self.held.get(request_id)
        return held.tokens if held is not None else None

    def head_tokens(self, request_id: str) -> int | None:
        """How many of a held request's token ids spell its prompt's head, where its
        template splits there (`splice.HEADS`: the head is T(H)[:-|G|] of the body without
        its history, `Turn.head_end`, no later template message is a system one, and the
        template's render is cut there, `HeadRule.cuts`) and the token after them is a
        split token; None where that is not proved.

        Proof: the ids are the tokenization of the prompt, so their first h spell its
        first ``sum(byte lengths)`` bytes; equal to the head's UTF-8 length, they spell the
        head exactly. For a tokenizer that does not say its ids' byte lengths (the Qwen
        ones normalize to NFC): token h is a split token (an added token, matched in the
        text itself, where its start is) that starts where the head ends, so the prompt
        is cut there at a split-token occurrence, where its tokenization splits
        (`tokens.tokenize`): the first h ids are the head's own tokenization. A what-if
        that changes the head alone then keeps the ids after it
        (`simulate.prepare.head_swapped`) without rendering this head again."""
        held = self.held.get(request_id)
        turn = held.turn if held is not None else None
        if held is None or turn is None or turn.head_end is None or turn.messages is None:
            return None
        tokens = held.tokens
        tok = load_tokenizer(tokens.prompt.tokenizer)
        lengths = tok.byte_lengths
        if not heads_split(tok.name, turn.messages, turn.head):
            return None
        h = int(np.searchsorted(tokens.char_starts, turn.head_end))
        if h >= len(tokens.ids) or int(tokens.ids[h]) not in piece_cache(tok).split_ids:
            return None
        if lengths is None:
            return h if int(tokens.char_starts[h]) == turn.head_end else None
        head = tokens.prompt.text[:turn.head_end].encode("utf-8", "surrogatepass")
        return h if int(lengths[tokens.ids[:h]].sum()) == len(head) else None

    def forget(self, request_id: str) -> None:
        """No later request reads this one's state: let it go."""
        self.held.pop(request_id, None)

    def keep_only(self, request_ids: Iterable[str]) -> None:
        """Forget every held request but these."""
        keep = set(request_ids)
        self.held = {rid: held for rid, held in self.held.items() if rid in keep}
