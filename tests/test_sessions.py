"""Session threading: explicit ids, history extension, side requests, compaction, parents."""

from __future__ import annotations

from pathlib import Path

from agent_captures import CODEX_SUMMARY, write_agent_captures
from factories import anthropic_body, conversation, make_request

from prefixscope.model import Usage
from prefixscope.model.keys import compaction_marker
from prefixscope.sessions import thread_sessions
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths


def thread(requests, gap_s: float = 3600.0):
    with Store.open(Path("s.duckdb")) as st:
        st.add(requests)
        links = thread_sessions(st.threading_rows(), gap_s=gap_s)
    return {ln.request_id: ln for ln in links}


class TestThreadingByHistory:
    def test_interleaved_sessions_with_side_request_and_compaction(self):
        a = [anthropic_body(conversation(n, "A "), cch=f"a{n:04x}") for n in (1, 2, 3, 4)]
        b = [anthropic_body(conversation(n, "B "), cch=f"b{n:04x}") for n in (1, 2, 3)]
        title = anthropic_body([{"role": "user", "content": "Write a 5-word title"}],
                               system="You generate titles.", tools=[])
        text = ("This session is being continued from a previous conversation that ran out "
                "of context. The conversation is summarized below: earlier work.")
        summary = anthropic_body([{"role": "user", "content": text}])
        after = anthropic_body([{"role": "user", "content": text},
                                {"role": "assistant", "content": "ok"},
                                {"role": "user", "content": "go on"}])
        reqs = [
            make_request("a1", minutes=0, body=a[0]), make_request("b1", minutes=1, body=b[0]),
            make_request("a2", minutes=2, body=a[1]), make_request("t1", minutes=2.5, body=title),
            make_request("b2", minutes=3, body=b[1]), make_request("a3", minutes=4, body=a[2]),
            make_request("b3", minutes=5, body=b[2]), make_request("a4", minutes=6, body=a[3]),
            make_request("c1", minutes=7, body=summary), make_request("c2", minutes=8, body=after),
        ]
        links = thread(reqs)
        sa = links["a1"].session
        assert [links[r].session for r in ("a2", "a3", "a4")] == [sa] * 3
        assert [links[r].prev_id for r in ("a2", "a3", "a4")] == ["a1", "a2", "a3"]
        assert links["b2"].prev_id == "b1" and links["b3"].prev_id == "b2"
        assert links["b1"].session != sa
        assert links["t1"].session not in (sa, links["b1"].session)
        assert links["t1"].link == "start"
        # A and B share the system prompt and tools and are both open: which one compacted
        # the log does not say, so c1 continues an unknown session instead of a guess
        assert (links["c1"].prev_id, links["c1"].link, links["c1"].compaction) == (
            None, "continuation", True)
        assert links["c1"].session not in (sa, links["b1"].session)
        assert links["c2"].link == "extends" and links["c2"].prev_id == "c1"
        assert [links[r].turn for r in ("a1", "a2", "a3", "a4")] == list(range(4))
        assert (links["c1"].turn, links["c2"].turn) == (0, 1)

    def test_a_compaction_with_one_open_session_like_it_continues_that_session(self):
        a = [anthropic_body(conversation(n, "A ")) for n in (1, 2, 3)]
        title = anthropic_body([{"role": "user", "content": "Write a 5-word title"}],
                               system="You generate titles.", tools=[])
        text = ("This session is being continued from a previous conversation that ran out "
                "of context. The conversation is summarized below: earlier work.")
        summary = anthropic_body([{"role": "user", "content": text}])
        reqs = [make_request("a1", minutes=0, body=a[0]), make_request("a2", minutes=1, body=a[1]),
                make_request("a3", minutes=2, body=a[2]), make_request("t1", minutes=3, body=title),
                make_request("c1", minutes=4, body=summary)]
        links = thread(reqs)
        # the title request has another system prompt: A is the only session c1 can continue
        assert (links["c1"].prev_id, links["c1"].link, links["c1"].compaction) == (
            "a3", "compaction", True)
        assert links["c1"].session == links["a1"].session and links["c1"].turn == 3

    def test_a_marked_request_with_no_session_open_is_a_continuation(self):
        text = ("This session is being continued from a previous conversation that ran out "
                "of context. The conversation is summarized below: earlier work.")
        links = thread([make_request("c1", body=anthropic_body([{"role": "user",
                                                                 "content": text}]))])
        assert (links["c1"].prev_id, links["c1"].link, links["c1"].compaction) == (
            None, "continuation", True)

    def test_same_system_and_tools_without_a_marker_is_a_new_session(self):
        """A shorter history under the same system prompt and tools is a new conversation
        unless a compaction marker says otherwise (no session id to say it)."""
        reqs = [make_request("a1", body=anthropic_body(conversation(1, "A "))),
                make_request("a2", minutes=1, body=anthropic_body(conversation(3, "A "))),
                make_request("b1", minutes=2, body=anthropic_body(conversation(1, "B "))),
                make_request("b2", minutes=3, body=anthropic_body(conversation(2, "B ")))]
        links = thread(reqs)
        assert links["b1"].link == "start" and not links["b1"].compaction
        assert links["b2"].prev_id == "b1" and links["b2"].session != links["a1"].session

    def test_longest_shared_history_decides_and_a_rewrite_stays_in_its_session(self):
        """A history rewritten in the middle (an elided observation) continues the request
        it shares the most with, not the latest one nor a new session."""
        base = conversation(4, "A ")  # u0 a0 u1 a1 u2 a2 u3
        rewritten = [*base[:2], {"role": "user", "content": "(output elided)"}, *base[3:],
                     {"role": "assistant", "content": "A answer 3"},
                     {"role": "user", "content": "A question 4"}]
        other = conversation(2, "A ")[:1] + [{"role": "assistant", "content": "elsewhere"}]
        links = thread([make_request("r1", body=anthropic_body(base[:3])),
                        make_request("r2", minutes=1, body=anthropic_body(base)),
                        make_request("x1", minutes=2, body=anthropic_body(other)),
                        make_request("r3", minutes=3, body=anthropic_body(rewritten))])
        # r3 shares u0 a0 with r1 and r2 (the latest of the two wins the tie), only u0 with
        # the later x1
        assert links["r3"].prev_id == "r2" and links["r3"].link == "shared-prefix"
        assert links["r2"].prev_id == "r1" and links["r2"].link == "extends"
        assert links["x1"].prev_id == "r2" and links["x1"].link == "shared-prefix"
        assert len({links[r].session for r in ("r1", "r2", "x1", "r3")}) == 1

    def test_cache_control_markers_do_not_break_extension(self):
        m1 = conversation(1)
        m2 = conversation(2)
        m2[0] = {"role": "user", "content": [{"type": "text", "text": "question 0",
                                              "cache_control": {"type": "ephemeral"}}]}
        m1[0] = {"role": "user", "content": [{"type": "text", "text": "question 0"}]}
        links = thread([make_request("r1", body=anthropic_body(m1)),
                        make_request("r2", minutes=1, body=anthropic_body(m2))])
        assert links["r2"].prev_id == "r1"

    def test_gap_splits_sessions(self):
        links = thread([make_request("r1", body=anthropic_body(conversation(1))),
                        make_request("r2", minutes=90, body=anthropic_body(conversation(2)))],
                       gap_s=3600)
        assert links["r2"].session != links["r1"].session

    def test_different_users_never_share_a_thread(self):
        links = thread([make_request("r1", body=anthropic_body(conversation(1)), user="u1"),
                        make_request("r2", minutes=1, body=anthropic_body(conversation(2)),
                                     user="u2")])
        assert links["r2"].prev_id is None

    def test_openai_system_message_change_does_not_break_thread(self):
        def body(n, cch):
            return {"messages": [{"role": "system", "content": f"x-anthropic-billing-header: "
                                  f"cch={cch};You are helpful."}] + conversation(n)}
        links = thread([make_request("r1", body=body(1, "aaaaa"), endpoint="openai-chat"),
                        make_request("r2", minutes=1, body=body(2, "bbbbb"),
                                     endpoint="openai-chat")])
        assert links["r2"].prev_id == "r1" and links["r2"].link == "extends"


class TestExplicitSessions:
    def test_explicit_key_groups_and_orders(self):
        links = thread([
            make_request("x1", session_key="S", minutes=0),
            make_request("y1", session_key="T", minutes=1),
            make_request("x2", session_key="S", minutes=2),
        ])
        assert links["x1"].session == links["x2"].session == "S"
        assert links["x2"].prev_id == "x1" and links["x2"].link == "explicit"
        assert links["y1"].session == "T" and links["y1"].turn == 0

    def test_side_request_inside_explicit_session_is_not_a_predecessor(self):
        main1 = anthropic_body(conversation(1))
        side = anthropic_body([{"role": "user", "content": "title?"}], system="titles", tools=[])
        main2 = anthropic_body(conversation(2))
        links = thread([make_request("m1", body=main1, session_key="S"),
                        make_request("s1", body=side, session_key="S", minutes=1),
                        make_request("m2", body=main2, session_key="S", minutes=2)])
        assert links["m2"].prev_id == "m1" and links["m2"].link == "extends"
        assert links["s1"].session == "S"

    def test_a_summary_as_long_as_the_history_it_replaced_is_a_compaction(self):
        """With a session id, a request whose first message is a compaction summary that
        no earlier request of the session sent compacted the session's latest request,
        even when it holds as many messages (a /compact one turn into a session, or right
        after another compaction); the turns after it keep that summary at their head and
        extend it, and a rewrite of one of them stays a rewrite."""
        text = ("This session is being continued from a previous conversation that ran out "
                "of context. The conversation is summarized below: earlier work.")
        first = conversation(2)  # u0 a0 u1: 3 messages
        summary = [{"role": "user", "content": text},
                   {"role": "assistant", "content": "ok"},
                   {"role": "user", "content": "go on"}]  # 3 messages too
        later = [*summary, {"role": "assistant", "content": "done"},
                 {"role": "user", "content": "long tool output"}]
        rewritten = [*summary, {"role": "assistant", "content": "done"},
                     {"role": "user", "content": "[Old tool result content cleared]"},
                     {"role": "assistant", "content": "next"}, {"role": "user", "content": "x"}]
        again = [{"role": "user", "content": text + " And more work."},
                 {"role": "assistant", "content": "ok"}, {"role": "user", "content": "on"}]
        links = thread([make_request(rid, body=anthropic_body(msgs), session_key="S",
                                     minutes=n)
                        for n, (rid, msgs) in enumerate([
                            ("r1", first), ("c1", summary), ("r2", later),
                            ("r3", rewritten), ("c2", again)])])
        assert (links["c1"].prev_id, links["c1"].link, links["c1"].compaction) == (
            "r1", "compaction", True)
        assert (links["r2"].prev_id, links["r2"].link, links["r2"].compaction) == (
            "c1", "extends", False)
        # keeps the summary at its head: a rewrite of r2's history, not another compaction
        assert (links["r3"].prev_id, links["r3"].link, links["r3"].compaction) == (
            "r2", "explicit", False)
        # a new summary (a compaction right after another): shares nothing with r3
        assert (links["c2"].prev_id, links["c2"].link, links["c2"].compaction) == (
            "r3", "compaction", True)

    def test_parent_key_joins_parent_session(self):
        links = thread([
            make_request("p", native_id="10", source_format="block-trace", minutes=0),
            make_request("c", native_id="11", parent_key="10", source_format="block-trace",
                         minutes=1),
        ])
        assert links["c"].session == links["p"].session and links["c"].link == "parent"


class TestWithoutBodies:
    def test_growing_prompt_threads_usage_only_rows(self):
        def r(rid, minutes, prompt, user="alice"):
            return make_request(rid, minutes=minutes, user=user, source_format="new-api",
                                usage=Usage(prompt_tokens=prompt))
        links = thread([r("n1", 0, 1000), r("n2", 1, 1500), r("n3", 2, 2200),
                        r("o1", 2.5, 900, user="bob")])
        assert links["n2"].prev_id == "n1" and links["n3"].prev_id == "n2"
        assert links["n3"].link == "growing-prompt"
        assert links["o1"].session != links["n1"].session

    def test_the_read_tells_two_open_runs_apart(self):
        # one user, one model, two conversations open at once (b starts smaller than a's
        # last prompt, so it opens a run of its own); each call reads its predecessor's
        # prompt less 2 tokens. b3 grew past a2, so both runs fit its prompt: its read of
        # 1,198 is b2's 1,200 less 2, a prefix a2's run never sent
        def r(rid, minutes, prompt, read):
            return make_request(rid, minutes=minutes, user="alice", source_format="new-api",
                                usage=Usage(prompt_tokens=prompt, cached_tokens=read))
        links = thread([r("a1", 0, 5_000, 0), r("b1", 1, 1_000, 0), r("b2", 2, 1_200, 998),
                        r("a2", 3, 5_500, 4_998), r("b3", 4, 6_000, 1_198),
                        r("x1", 5, 7_000, 0)])
        assert links["b1"].session != links["a1"].session
        assert [links[k].prev_id for k in ("b2", "a2", "b3")] == ["b1", "a1", "b2"]
        # nothing read: the largest run that fits, as before
        assert links["x1"].prev_id == "b3"

    def test_block_traces_thread_by_full_block_prefix(self):
        def r(rid, minutes, hashes, tokens):
            return make_request(rid, minutes=minutes, source_format="block-trace",
                                block_hashes=tuple(hashes), block_size=512,
                                usage=Usage(prompt_tokens=tokens), model=None)
        links = thread([r("b1", 0, [1, 2, 3], 1100), r("b2", 1, [1, 2, 4, 5], 1900),
                        r("b3", 2, [9, 10], 1024)])
        # b1 has two full blocks [1, 2] (1100 // 512); b2 starts with them
        assert links["b2"].prev_id == "b1"
        assert links["b3"].prev_id is None


def threaded_capture(path: Path, **kw):
    """Write the 8-session capture, ingest it, and return (truth, links by response id)."""
    calls = write_agent_captures(path, **kw)
    with Store.open(Path("agents.duckdb")) as st:
        ingest_paths([str(path)], st)
        rows = st.run("SELECT r.native_id, t.session, p.native_id, t.link, t.compaction "
                      "FROM turns t JOIN requests r ON r.id = t.id "
                      "LEFT JOIN requests p ON p.id = t.prev_id")
    return calls, {r[0]: r[1:] for r in rows}


def truth_predecessors(calls):
    """response id -> the response id of the same session's previous call (the oracle)."""
    last: dict[int, str] = {}
    out = {}
    for call in calls:
        out[call.response_id] = last.get(call.session)
        last[call.session] = call.response_id
    return out


def partition(groups):
    return sorted(sorted(g) for g in groups.values())


class TestEightAgentSessions:
    """8 agent sessions with one system prompt and one tool list, interleaved in one raw
    capture (tests/agent_captures.py): threading must find the 8 the generator wrote."""

    def check(self, calls, links, compacted=()):
        truth: dict[int, list[str]] = {}
        for call in calls:
            truth.setdefault(call.session, []).append(call.response_id)
        found: dict[str, list[str]] = {}
        for rid, (session, _, _, _) in links.items():
            found.setdefault(session, []).append(rid)
        assert partition(found) == partition(truth)
        expected = truth_predecessors(calls)
        assert {rid: links[rid][1] for rid in links} == expected
        assert {rid for rid, ln in links.items() if ln[3]} == set(compacted)
        assert {ln[2] for rid, ln in links.items() if expected[rid] is None} == {"start"}

    def test_without_ids(self, tmp_path):
        calls, links = threaded_capture(tmp_path / "agents.jsonl")
        assert len(calls) == 48
        self.check(calls, links)
        assert {ln[2] for ln in links.values()} == {"start", "extends"}

    def test_with_ids(self, tmp_path):
        calls, links = threaded_capture(tmp_path / "agents.jsonl", with_ids=True)
        self.check(calls, links)
        assert {links[c.response_id][0] for c in calls} == {f"session-{s:02d}" for s in range(8)}

    def test_compaction_marker_among_open_look_alikes_continues_an_unknown_session(
            self, tmp_path):
        # session 2 compacts while the 7 others (same system prompt and tools) are open
        calls, links = threaded_capture(tmp_path / "agents.jsonl", compact_after={2: 3})
        (summary,) = [c.response_id for c in calls if c.compaction]
        assert links[summary][1:] == (None, "continuation", True)
        before = [c.response_id for c in calls if c.session == 2 and c.turn < 3]
        after = [c.response_id for c in calls if c.session == 2 and c.turn >= 3]
        assert len({links[r][0] for r in before}) == 1
        assert {links[r][0] for r in after} == {links[summary][0]}
        assert links[summary][0] != links[before[0]][0]
        expected = truth_predecessors(calls)
        expected[summary] = None
        assert {rid: links[rid][1] for rid in links} == expected
        assert len({ln[0] for ln in links.values()}) == 9

    def test_sixteen_sessions_that_each_compact_join_no_two_conversations(self, tmp_path):
        # 16 interleaved sessions, one system prompt and tool list, no ids, 8 calls each,
        # each compacting at its 5th call a while after its 4th (others' calls between):
        # 128 calls, 16 starts, 16 compactions. Guessing the latest look-alike joined 15
        # of the 112 pairs across two conversations (13.4%).
        calls, links = threaded_capture(tmp_path / "agents.jsonl", sessions=16, turns=8,
                                        compact_after=dict.fromkeys(range(16), 4),
                                        compaction_at_once=False)
        assert len(calls) == 128
        session_of = {c.response_id: c.session for c in calls}
        pairs = [(rid, ln[1]) for rid, ln in links.items() if ln[1] is not None]
        assert [p for p in pairs if session_of[p[0]] != session_of[p[1]]] == []
        continuations = [rid for rid, ln in links.items() if ln[2] == "continuation"]
        assert sorted(continuations) == sorted(c.response_id for c in calls if c.compaction)
        assert len(continuations) == 16 and all(links[r][3] for r in continuations)
        assert len(pairs) == 128 - 16 - 16

    def test_summary_without_a_marker_starts_a_session(self, tmp_path):
        calls, links = threaded_capture(tmp_path / "agents.jsonl", compact_after={2: 3},
                                        compaction_text="Here is where we are.")
        summary = next(c for c in calls if c.compaction)
        assert links[summary.response_id][1:3] == (None, "start")
        # the summary and the turns after it are a ninth session; the other 7 are intact
        sessions = {ln[0] for ln in links.values()}
        assert len(sessions) == 9
        after = [c.response_id for c in calls if c.session == 2 and c.turn >= 3]
        assert {links[r][0] for r in after} == {links[summary.response_id][0]}


class TestCompactionMarkers:
    """Each agent's marker, written as that agent writes it (the sources are cited in
    prefixscope/model/keys.py), and text that only resembles one."""

    def marker(self, messages, endpoint="openai-chat"):
        body = ({"input": messages} if endpoint == "openai-responses"
                else {"messages": [{"role": "system", "content": "sys"}, *messages]})
        return compaction_marker(make_request("r", body=body, endpoint=endpoint))

    def test_each_agent(self):
        claude = ("This session is being continued from a previous conversation that ran out "
                  "of context. The conversation is summarized below:\nAnalysis: ...")
        assert self.marker([{"role": "user", "content": [{"type": "text", "text": claude}]}]
                           ) == "claude-code"
        assert self.marker([{"role": "user", "content": CODEX_SUMMARY}]) == "codex"
        assert self.marker([{"type": "message", "role": "user", "content": [
                                {"type": "input_text", "text": "fix the bug"}]},
                            {"type": "compaction", "encrypted_content": "gAAA..."}],
                           endpoint="openai-responses") == "codex"
        assert self.marker([{"role": "user", "content": "task"},
                            {"role": "user", "content": "USER_CONTEXT: fix the parser\n"
                                                        "COMPLETED: read the tests"}]
                           ) == "openhands"
        assert self.marker([{"role": "user", "content": "task"},
                            {"role": "tool", "content": "Old environment output: (42 lines "
                                                        "omitted)"}]) == "swe-agent"

    def test_look_alikes_are_not_markers(self):
        assert self.marker([{"role": "user", "content": "Summarize the conversation so far."}]
                           ) is None
        assert self.marker([{"role": "user", "content": "Is USER_CONTEXT: a keyword?"}]) is None


class TestChainValues:
    """Threading holds each request's chain as an ``array('Q')`` (`sessions._compact`) for
    its memory; the store's chain values are unsigned 64-bit hashes, any of them."""

    @staticmethod
    def rows(histories, labels):
        """Threading rows of requests with these histories (tuples of message numbers, in
        time order, each with its explicit session or None), each history prefix's chain
        value given by `labels` (a one-to-one map of the distinct prefixes)."""
        from datetime import datetime, timedelta

        start = datetime(2026, 1, 1)
        return [{"id": f"r{n:03d}", "timestamp": start + timedelta(minutes=n),
                 "source_format": "codex", "session_key": key, "parent_key": None,
                 "native_id": None, "user_id": None, "client": None, "model": "m",
                 "prefix_chain": [labels[h[:k]] for k in range(1, len(h) + 1)],
                 "fingerprint": "f", "message_count": len(h), "prompt_tokens": 100 * len(h),
                 "compaction_marker": marker}
                for n, (h, key, marker) in enumerate(histories)]

    def test_threading_depends_on_which_values_are_equal_not_on_their_size(self):
        from hypothesis import given, settings
        from hypothesis import strategies as st

        history = st.lists(st.integers(0, 2), min_size=0, max_size=6).map(tuple)
        request = st.tuples(history, st.sampled_from([None, "s1", "s2"]),
                            st.sampled_from([None, None, "codex"]))

        @settings(max_examples=150, deadline=None)
        @given(st.lists(request, min_size=1, max_size=40))
        def check(histories):
            prefixes = sorted({h[:k] for h, _, _ in histories for k in range(1, len(h) + 1)})
            small = {p: n + 1 for n, p in enumerate(prefixes)}
            # the same equalities, at the top of the unsigned 64-bit range (2**64 - 1 down)
            large = {p: (1 << 64) - 1 - n for n, p in enumerate(prefixes)}
            assert (thread_sessions(self.rows(histories, small))
                    == thread_sessions(self.rows(histories, large)))

        check()

    def test_a_history_longer_than_recent_requests_extends_its_predecessor(self):
        # 40 turns of one session, each history the last one plus a message: every turn
        # extends the one before, the chain values the largest the store holds
        turns = [(tuple(range(k)), "s", None) for k in range(1, 41)]
        prefixes = {tuple(range(k)): (1 << 64) - k for k in range(1, 41)}
        links = thread_sessions(self.rows(turns, prefixes))
        assert [(ln.prev_id, ln.link, ln.turn) for ln in links] == [
            (None, "start", 0)] + [(f"r{n - 1:03d}", "extends", n) for n in range(1, 40)]
