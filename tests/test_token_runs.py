"""A session's turns share one buffer of token ids and starts (`tokens.tokenize._Run`):
each turn's arrays are read-only views of it, and a turn that goes on from all of the
last turn written (or lays out its last tokens again as the same ones) appends in place
instead of copying the prompt's arrays. The oracle is the tokenizer's own encoding of
each whole text (no piece cache, no previous turn), for
chains of turns, turns branching from one predecessor, heads that change, and every
earlier turn read again after later ones were written; and `common_prefix_length` and
`common_run` (the first difference, looked for a growing block at a time) against a loop
over the elements."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixscope.tokenizers import Encoded, load_tokenizer
from prefixscope.tokens.tokenize import (
    PieceCache,
    common_prefix_length,
    common_run,
    common_text_prefix,
)

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
NAMES = ("deepseek-v4", "qwen3.6", "o200k-harmony")


def whole(name: str, text: str) -> tuple[list[int], list[int]]:
    """The tokenizer's ids and token starts of `text` encoded alone."""
    enc = load_tokenizer(name).encode(text)
    return enc.ids.tolist(), enc.starts.tolist()


def bits(name: str) -> st.SearchStrategy[str]:
    """Pieces of prompt text: the tokenizer's split tokens (where a turn's ids are taken
    from its predecessor's) among words, digits, line breaks and a non-ASCII letter."""
    splitters = list(PieceCache(load_tokenizer(name)).splitters)
    return st.one_of(st.sampled_from(splitters),
                     st.sampled_from(["a", " word", "\n", "12", "{\"k\": 1}", "é", "  "]))


def _first_turn(name: str, data: st.DataObject, after_split: bool = False
                ) -> tuple[PieceCache, st.SearchStrategy[str], str, str]:
    """A piece cache with small chunks and middles (every path of `encode_many` on short
    texts), the pieces of text, the first text's head (one of the split tokens if
    `after_split`, else empty) and a long first text opening with it (its buffer has room
    for the next turns: a quarter of its length)."""
    cache = PieceCache(load_tokenizer(name), chunk_min=4, middle_min=1)
    piece = bits(name)
    head = data.draw(st.sampled_from(list(cache.splitters))) if after_split else ""
    first = head + " base" * 80 + "".join(data.draw(st.lists(piece, min_size=1, max_size=8)))
    return cache, piece, head, first


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_every_turn_is_its_whole_text_and_stays_so(name, data):
    cache, piece, _, first = _first_turn(name, data)
    texts, made = [first], [cache.encode_many([first])[0]]
    for _ in range(data.draw(st.integers(1, 8))):
        # mostly the last turn; sometimes an earlier one (a branch: its buffer goes on
        # past it already), sometimes with its first character changed (a new head)
        at = data.draw(st.one_of(st.just(len(texts) - 1), st.integers(0, len(texts) - 1)))
        before = texts[at]
        if data.draw(st.booleans()):
            before = data.draw(st.sampled_from("xZ7\n")) + before[1:]
        text = before + "".join(data.draw(st.lists(piece, max_size=6)))
        enc = cache.encode_many([text], [(texts[at], made[at], 0)])[0]
        assert (enc.ids.tolist(), enc.starts.tolist()) == whole(name, text)
        assert not enc.ids.flags.writeable and not enc.starts.flags.writeable
        texts.append(text)
        made.append(enc)
    for text, enc in zip(texts, made, strict=True):  # no later turn changed an earlier one
        assert (enc.ids.tolist(), enc.starts.tolist()) == whole(name, text)


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_a_turn_changed_past_a_split_token_is_copied_and_the_last_turn_kept(name, data):
    # A head changed after the prompt's first split token (a billing header inside the
    # system message): the turn is laid out from that split token, compared with the last
    # turn's buffer entry by entry, refused at the change and written to its own buffer.
    cache, piece, split, first = _first_turn(name, data, after_split=True)
    second = first + "".join(data.draw(st.lists(piece, min_size=1, max_size=6)))
    made = cache.encode_many([first])
    made.append(cache.encode_many([second], [(first, made[0], 0)])[0])
    where = data.draw(st.integers(len(split), len(second) - 1))
    changed = second[:where] + data.draw(st.sampled_from("xZ7\n")) + second[where + 1:]
    third = (changed if changed != second else second[:where] + "Q" + second[where + 1:]) \
        + "".join(data.draw(st.lists(piece, max_size=6)))
    made.append(cache.encode_many([third], [(second, made[1], 0)])[0])
    assert not np.shares_memory(made[2].ids, made[1].ids)
    for text, enc in zip((first, second, third), made, strict=True):
        assert (enc.ids.tolist(), enc.starts.tolist()) == whole(name, text)


def _chain(name: str, first: str, each: str) -> tuple[PieceCache, list[str], list[Encoded]]:
    """A session of four turns, each its predecessor's text, a reply and `each` (the reply
    in place of ``{}``), encoded from its predecessor; every turn after the first is
    asserted to be views of the first one's buffer (appended in place)."""
    cache = PieceCache(load_tokenizer(name))
    texts = [first]
    made = [cache.encode_many(texts)[0]]
    for turn in ("hi there", "more words", "and a last reply"):
        text = texts[-1] + each.format(turn)
        made.append(cache.encode_many([text], [(texts[-1], made[-1], 0)])[0])
        texts.append(text)
    # one buffer, each turn's views from its start (the first turn made it with room)
    assert all(np.shares_memory(made[0].ids, enc.ids) for enc in made[1:])
    return cache, texts, made


def test_a_turn_that_goes_on_from_its_predecessor_is_appended_in_place():
    name = "deepseek-v4"
    user, assistant = "<｜User｜>", "<｜Assistant｜>"
    cache, texts, made = _chain(  # a quarter's room: ~50 tokens
        name, f"{' system' * 200}{user}hello{assistant}",
        f"{{}}<｜end▁of▁sentence｜>{user}next{assistant}")
    assert common_prefix_length(made[1].ids, made[3].ids) == len(made[1].ids)
    # a second turn after the first one (a branch): the first's buffer is not written
    other = f"{texts[0]}another reply<｜end▁of▁sentence｜>"
    branch = cache.encode_many([other], [(texts[0], made[0], 0)])[0]
    assert not np.shares_memory(branch.ids, made[0].ids)
    for text, enc in zip([*texts, other], [*made, branch], strict=True):
        assert (enc.ids.tolist(), enc.starts.tolist()) == whole(name, text)


def prefix_by_loop(a: np.ndarray, b: np.ndarray) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@given(st.lists(st.integers(0, 3), max_size=40), st.data())
def test_views_of_one_buffer_share_their_prefix_and_others_are_compared(values, data):
    buffer = np.array(values, dtype=np.uint32)
    i, j = data.draw(st.integers(0, len(values))), data.draw(st.integers(0, len(values)))
    shift = data.draw(st.integers(0, 2))
    for a, b in ((buffer[:i], buffer[:j]), (buffer[shift:], buffer[:j]),
                 (buffer[:i], buffer[:j].copy()), (buffer[::2], buffer[:j])):
        assert common_prefix_length(a, b) == prefix_by_loop(a, b)


@given(st.integers(0, 20_000), st.integers(0, 20_000), st.booleans())
def test_a_difference_anywhere_in_long_arrays_is_found(length, where, differs):
    a = np.arange(length, dtype=np.uint32) % 7
    b = a.copy()
    if differs and where < length:
        b[where] += 1
    expected = where if differs and where < length else length
    assert common_prefix_length(a, b) == expected
    assert common_prefix_length(a, b[:where]) == min(expected, where, length)


@given(st.text("ab", max_size=30), st.text("ab", max_size=30), st.data())
def test_the_common_run_at_two_places_is_the_first_difference(a, b, data):
    i, j = data.draw(st.integers(0, len(a))), data.draw(st.integers(0, len(b)))
    expected = next((k for k, (x, y) in enumerate(zip(a[i:], b[j:], strict=False)) if x != y),
                    min(len(a) - i, len(b) - j))
    assert common_run(a, i, b, j) == expected


def test_a_difference_at_every_place_of_a_text_is_found_at_that_place():
    # One character changed at each place in turn of a 1,400-character text: its first
    # block (256), the next (1,024) and into the third, at every place a halving can end,
    # read from other starts in the two strings; the answer is the changed place.
    a = "".join(chr(97 + k % 23) for k in range(1_400))
    for where in range(len(a)):
        b = a[:where] + "Z" + a[where + 1:]
        assert common_run("xy" + a, 2, "bbbbb" + b, 5) == where
    assert common_run("xy" + a, 2, "bbbbb" + a, 5) == len(a)


@given(st.integers(0, 5_000), st.integers(0, 5_000), st.integers(0, 6_000), st.booleans())
def test_a_text_difference_anywhere_is_found_past_every_block(length, where, known, differs):
    a = "".join(chr(97 + k % 5) for k in range(length))
    b = a[:where] + "Z" + a[where + 1:] if differs and where < length else a
    expected = where if differs and where < length else length
    assert common_text_prefix(a, b, min(known, expected)) == expected
    assert common_text_prefix(a, b + "tail") == expected


def test_a_turn_that_lays_out_its_predecessors_last_tokens_again_is_appended_in_place():
    # o200k-harmony's prompts end with "<|start|>assistant": the next turn goes on
    # "assistant<|channel|>...", and "assistant" (after the last split token both share)
    # is laid out again -- the same token, so the turn is written after its predecessor
    name = "o200k-harmony"
    cache, texts, made = _chain(
        name, f"<|start|>system<|message|>{' rules' * 200}<|end|><|start|>assistant",
        "<|channel|>final<|message|>{}<|end|><|start|>assistant")
    # a last token laid out as another one ("assistant" -> "assistants"): copied, and the
    # predecessor's views keep their ids
    other = f"{texts[-1]}s"
    apart = cache.encode_many([other], [(texts[-1], made[-1], 0)])[0]
    assert whole(name, other)[0][-1] != made[-1].ids[-1]
    assert not np.shares_memory(apart.ids, made[0].ids)
    for text, enc in zip([*texts, other], [*made, apart], strict=True):
        assert (enc.ids.tolist(), enc.starts.tolist()) == whole(name, text)
