"""Memory bounded by a batch, not by the log (issue 11), checked by structure, never by time.

* content-addressed bodies (`store.parts`) give back every fixture body byte for byte;
* a V3 store (whole bodies) upgrades to V4 and reads the same;
* the ingest batch knobs set tiny store exactly what the defaults store;
* detection of a JSON-lines log never reads the file whole;
* `Store.iter_requests` streams the same requests whatever its batch.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
from conftest import store_at_schema
from factories import anthropic_body, conversation, make_request

from prefixscope.ingest import read_requests
from prefixscope.ingest.probing import probe
from prefixscope.ingest.source import PROBE_BYTES, Source
from prefixscope.model.bodytext import write_body
from prefixscope.model.hashing import exact_hash, exact_json
from prefixscope.store import SCHEMA_VERSION, Store, load
from prefixscope.store.load import ingest_paths
from prefixscope.store.parts import join_body, layout_hashes, layout_json, split_body

HERE = Path(__file__).resolve().parent
REAL = HERE / "data" / "real"
# the real logs with request bodies (Mooncake and TraceLab have none)
WITH_BODIES = [str(REAL / d) for d in ("swe-agent", "openhands", "langfuse", "mini-swe-agent",
                                      "claude-code-jsonl")]
FIXTURES = HERE / "fixtures"


def fixture_bodies() -> list[Any]:
    """Every request body the parsers read from the real data and the fixtures."""
    bodies = []
    for base in (*map(Path, WITH_BODIES), FIXTURES):
        for path in sorted(base.rglob("*")):
            if not path.is_file() or path.suffix in (".md", ".txt"):
                continue
            try:
                requests, _ = read_requests(path)
            except ValueError:
                continue
            bodies.extend(r.body for r in requests if r.body is not None)
    return bodies


class TestContentAddressedBodies:
    def test_every_fixture_body_comes_back_byte_for_byte(self):
        bodies = fixture_bodies()
        assert len(bodies) > 300  # the real trajectories alone hold hundreds
        split = 0
        for body in bodies:
            parts = split_body(body)
            if parts is None:
                back = join_body(exact_json(body), None, {})
            else:
                split += 1
                skeleton, layout, texts = parts
                assert all(exact_hash(t) == h for h, t in texts.items())
                back = join_body(skeleton, layout_json(layout), texts)
            assert exact_json(back) == exact_json(body)
            assert back == orjson.loads(exact_json(body))
        assert split > 300

    def test_a_message_resent_every_turn_is_stored_once(self):
        first = conversation(1)[0]
        reqs = [make_request(f"r{n}", body=anthropic_body(conversation(n)))
                for n in range(1, 6)]
        with Store.open(Path("p.duckdb")) as store:
            store.add(reqs)
            stored = store.run("SELECT count(*) FROM parts WHERE part = ?",
                               [exact_json(first)])[0][0]
            n_parts = store.run("SELECT count(*) FROM parts")[0][0]
            back = [store.get(f"r{n}").body for n in range(1, 6)]
        assert stored == 1
        # 5 growing conversations of 1..5 messages hold 5 distinct messages (plus the
        # system and tool elements the factory's body has, each once)
        distinct = {exact_json(e) for r in reqs for k in ("messages", "system", "tools")
                    if isinstance((r.body or {}).get(k), list) for e in (r.body or {})[k]}
        assert n_parts == len(distinct)
        assert back == [r.body for r in reqs]

    def test_a_layout_names_every_part_in_order(self):
        body = {"model": "m", "system": [{"type": "text", "text": "s"}],
                "messages": [{"role": "user", "content": "a"},
                             {"role": "user", "content": "a"}]}
        split = split_body(body)
        assert split is not None
        skeleton, layout, texts = split
        assert orjson.loads(skeleton) == {"model": "m", "system": [], "messages": []}
        assert list(orjson.loads(skeleton)) == ["model", "system", "messages"]
        a = exact_hash(exact_json({"role": "user", "content": "a"}))
        assert layout["messages"] == [a, a]
        assert layout_hashes(layout_json(layout)) == [
            exact_hash(exact_json({"type": "text", "text": "s"})), a, a]
        assert len(texts) == 2


def v3_store(path: Path, body: dict[str, Any]) -> str:
    """A store as prefixscope wrote it at schema v3 (whole bodies), with one request."""
    con = store_at_schema(path, 3)
    text = exact_json(body)
    digest = exact_hash(text)
    con.execute("INSERT INTO requests (id, source_format, source_file, endpoint, has_body, "
                "body_truncated, body_hash, ingested_at) VALUES ('old', 'raw', 'f.jsonl', "
                "'anthropic-messages', true, false, ?, ?)", [digest, datetime(2026, 1, 1)])
    con.execute("INSERT INTO bodies VALUES (?, ?)", [digest, text])
    con.close()
    return digest


class TestMigrationV4:
    def test_a_v3_store_upgrades_and_reads_its_whole_bodies_as_before(self):
        body = anthropic_body(conversation(3))
        digest = v3_store(Path("v3.duckdb"), body)
        with Store.open(Path("v3.duckdb")) as store:
            assert store.run("SELECT max(version) FROM schema_version")[0][0] == SCHEMA_VERSION
            assert SCHEMA_VERSION >= 4  # every later migration ran too
            assert store.run("SELECT layout FROM bodies WHERE hash = ?", [digest]) == [(None,)]
            assert store.get("old").body == body
            # a new request sharing the old one's history is stored by parts beside it
            store.add([make_request("new", body=anthropic_body(conversation(4)))])
            got = {r.id: r.body for r in store.iter_requests()}
        assert got == {"old": body, "new": anthropic_body(conversation(4))}
        assert exact_json(got["old"]) == exact_json(body)


class TestMigrationV5:
    def test_a_v3_store_gains_the_one_hour_write_column_unset_and_new_rows_fill_it(self):
        v3_store(Path("v3.duckdb"), anthropic_body(conversation(2)))
        with Store.open(Path("v3.duckdb")) as store:
            assert store.get("old").usage.cache_write_1h_tokens is None  # not re-derived
            new = make_request("new", body=anthropic_body(conversation(3)))
            store.add([replace(new, usage=replace(new.usage, prompt_tokens=900,
                                                  cache_write_tokens=500,
                                                  cache_write_1h_tokens=200))])
            got = {r.id: r.cache_write_1h_tokens for r in store.usage_records()}
        assert got == {"old": None, "new": 200}


def table(store: Store, sql: str) -> list[tuple[Any, ...]]:
    return store.run(sql)


def stored(store: Store, result: Any) -> tuple[Any, ...]:
    """What an ingest stored, row for row, and its counts (its time aside)."""
    return (result.ingested, result.sessions, result.skipped,
            store.run("SELECT * EXCLUDE (ingested_at) FROM requests ORDER BY id"),
            store.run("SELECT * FROM bodies ORDER BY hash"),
            store.run("SELECT * FROM parts ORDER BY hash"),
            store.run("SELECT * FROM sessions ORDER BY request_id"))


class TestBoundedIngest:
    @pytest.mark.slow
    def test_tiny_batches_store_exactly_what_the_default_batches_store(self):
        stores = []
        for name, knobs in (("default", {}), ("tiny", {"batch_size": 1, "batch_bytes": 1})):
            with Store.open(Path(f"{name}.duckdb")) as store:
                result = ingest_paths(WITH_BODIES, store, **knobs)
                stores.append(stored(store, result))
        assert stores[0][0] > 100
        assert stores[0] == stores[1]

    def test_an_agents_real_rollouts_store_the_same_whatever_their_batches(self, monkeypatch):
        # Codex rollouts: each call resends the last one's history (the very objects), so
        # a batch is cut by its new text (`BATCH_NEW_BYTES`); one call a batch is the oracle
        stores = []
        for name, cap in (("default", None), ("tiny", 1)):
            if cap is not None:
                monkeypatch.setattr(load, "BATCH_NEW_BYTES", cap)
            with Store.open(Path(f"{name}.duckdb")) as store:
                result = ingest_paths([str(REAL / "codex-desktop" / "sessions")], store)
                stores.append(stored(store, result))
        assert stores[0][0] == 485  # the publisher's call count (tests/data/real/README.md)
        assert stores[0] == stores[1]

    def test_an_agents_calls_are_cut_by_their_new_text_and_captures_by_their_whole(
            self, monkeypatch):
        # 12 calls, each resending the last one's messages (these objects) and one more.
        # By hand: an element {"c":"x"*939} is 947 bytes; call i's whole body
        # {"messages":[...]} is 15 + 947 (i + 1) + i commas = 962 + 948 i; it shares i
        # elements with call i - 1, so its new bytes are 962 + i, and its layout 38 a hash
        # (i + 1 of them): 1000 + 39 i in all.
        element = [{"c": "x" * 939} for _ in range(12)]
        bodies = [{"messages": element[:i + 1]} for i in range(12)]
        assert [len(orjson.dumps(b)) for b in bodies[:3]] == [962, 1910, 2858]

        class Writes:  # the store's side of a batch: how many requests each write gave
            ingest_run = None

            def __init__(self) -> None:
                self.sizes: list[int] = []

            def transaction(self) -> contextlib.AbstractContextManager[None]:
                return contextlib.nullcontext()

            def add(self, requests: list[Any], prefer: Any, body_texts: Any) -> int:
                self.sizes.append(len(requests))
                return len(requests)

        monkeypatch.setattr(load, "BATCH_NEW_BYTES", 3000)
        written = {}
        for fresh in (False, True):  # as an agent's log gives them; parsed afresh (captures)
            store = Writes()
            batch = load._Batch(cast(Store, store), max_count=10_000, max_bytes=5000)
            for i, body in enumerate(bodies):
                given = orjson.loads(orjson.dumps(body)) if fresh else body
                batch.add(make_request(f"r{i}", body=given), None, None, write_body(given))
            batch.write()
            written[fresh] = store.sizes
        # an agent's: a batch's first call whole (962, 4754 < 5000), then new bytes 1039 +
        # 1078 + 1117 = 3234 >= 3000 (calls 0-3), 1195 + 1234 + 1273 = 3702 (4-7); call 8
        # alone is 8546 >= 5000 whole, and so is each after it, first in its batch
        assert written[False] == [4, 4, 1, 1, 1, 1]
        # captures: whole bodies, 962 + 1910 + 2858 = 5730 (0-2), 3806 + 4754 (3-4), then
        # each from 5702 on alone
        assert written[True] == [3, 2, 1, 1, 1, 1, 1, 1, 1]

    def test_progress_moves_through_a_file_by_bytes_and_requests(self):
        log = Path("many.jsonl")
        lines = [orjson.dumps({"model": "m", "messages": [
            {"role": "user", "content": f"question {i} " + "x" * 2000}]}) for i in range(40)]
        log.write_bytes(b"\n".join(lines) + b"\n")
        calls: list[tuple[str, int, int, int]] = []
        with Store.open(Path("p.duckdb")) as store:
            ingest_paths([str(log)], store, batch_size=5,
                         progress=lambda *call: calls.append(call))
        size = log.stat().st_size
        assert all(name == str(log) and total == size for name, _, total, _ in calls)
        # one call per stored batch of 5 (the parser reads ahead in blocks), then the file's
        assert len(calls) == 40 // 5 + 1
        assert [requests for *_, requests in calls] == [5, 10, 15, 20, 25, 30, 35, 40, 40]
        done = [d for _, d, _, _ in calls]
        assert done == sorted(done) and done[-1] == size and 0 < done[0] < size

    def test_a_json_lines_log_is_detected_without_reading_it_whole(self, monkeypatch):
        log = Path("big.jsonl")
        line = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 500}]})
        log.write_bytes((line + b"\n") * (2 * PROBE_BYTES // len(line)))

        def whole(self: Source) -> bytes:
            raise AssertionError("read whole")

        monkeypatch.setattr(Source, "read_bytes", whole)
        found = probe(Source.from_path(log))
        assert found.kind == "jsonl"
        assert found.first == orjson.loads(line)


class TestStreamingReads:
    def test_iter_requests_is_the_same_stream_whatever_its_batch(self):
        with Store.open(Path("s.duckdb")) as store:
            ingest_paths([str(REAL / "swe-agent"), str(REAL / "openhands")], store)
            one = [(r.id, exact_json(r.body)) for r in store.iter_requests(batch=1)]
            many = [(r.id, exact_json(r.body)) for r in store.iter_requests(batch=10_000)]
            direct = store.get_many(rid for rid, _ in one)
        assert len(one) > 100
        assert one == many
        assert one == [(rid, exact_json(direct[rid].body)) for rid, _ in one]

    def test_iter_requests_is_a_generator(self):
        with Store.open(Path("g.duckdb")) as store:
            store.add([make_request("r", body=anthropic_body(conversation(2)))])
            stream = store.iter_requests()
            assert not isinstance(stream, list | tuple)
            assert next(iter(stream)).id == "r"


@pytest.fixture(autouse=True)
def _here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
