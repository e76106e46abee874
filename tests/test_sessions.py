"""Session threading: explicit ids, history extension, side requests, compaction, parents."""

from __future__ import annotations

from pathlib import Path

from factories import anthropic_body, conversation, make_request

from prefixscope.model import Usage
from prefixscope.sessions import thread_sessions
from prefixscope.store import Store


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
        summary = anthropic_body([{"role": "user", "content": "Summary of earlier work."}])
        after = anthropic_body([{"role": "user", "content": "Summary of earlier work."},
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
        assert [links[r].session for r in ("a2", "a3", "a4", "c1", "c2")] == [sa] * 5
        assert [links[r].prev_id for r in ("a2", "a3", "a4")] == ["a1", "a2", "a3"]
        assert links["b2"].prev_id == "b1" and links["b3"].prev_id == "b2"
        assert links["b1"].session != sa
        assert links["t1"].session not in (sa, links["b1"].session)
        assert links["t1"].link == "start"
        assert links["c1"].link == "compaction" and links["c1"].compaction
        assert links["c1"].prev_id == "a4"
        assert links["c2"].link == "extends" and links["c2"].prev_id == "c1"
        assert [links[r].turn for r in ("a1", "a2", "a3", "a4", "c1", "c2")] == list(range(6))

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
