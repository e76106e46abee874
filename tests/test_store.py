"""The DuckDB store: migrations, dedupe by id, faithful round trip of every field."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import duckdb
import pytest
from conftest import ROOT
from factories import anthropic_body, conversation, make_request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixscope.model import Request, Usage
from prefixscope.store import SCHEMA_VERSION, Store, StoreError

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                      st.text(max_size=20))
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)
maybe_int = st.one_of(st.none(), st.integers(0, 10**7))
maybe_text = st.one_of(st.none(), st.text(min_size=1, max_size=20))

requests = st.builds(
    Request,
    id=st.text(alphabet="0123456789abcdef", min_size=8, max_size=32),
    source_format=st.sampled_from(["raw", "langfuse", "new-api"]),
    source_file=st.text(min_size=1, max_size=30),
    source_line=st.one_of(st.none(), st.integers(1, 10**6)),
    timestamp=st.one_of(st.none(), st.datetimes(min_value=datetime(2000, 1, 1),
                                                max_value=datetime(2100, 1, 1))),
    endpoint=st.sampled_from(["anthropic-messages", "openai-chat", "openai-responses",
                              "unknown"]),
    model=maybe_text, session_key=maybe_text, session_key_source=maybe_text,
    parent_key=maybe_text, user=maybe_text, client=maybe_text, channel=maybe_text,
    gateway=maybe_text, native_id=maybe_text,
    body=st.one_of(st.none(), st.dictionaries(st.text(max_size=8), json_value, max_size=4)),
    body_truncated=st.booleans(),
    output=st.one_of(st.none(), json_value),
    usage=st.builds(Usage, prompt_tokens=maybe_int, cached_tokens=maybe_int,
                    cache_write_tokens=maybe_int, output_tokens=maybe_int,
                    semantics=maybe_text),
    block_hashes=st.one_of(st.none(), st.lists(st.integers(0, 2**62), max_size=5).map(tuple)),
    block_size=st.one_of(st.none(), st.sampled_from([16, 512])),
    metadata=st.dictionaries(st.text(min_size=1, max_size=8), json_value, max_size=3),
)


class TestRoundTrip:
    @settings(max_examples=60, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @pytest.mark.slow
    @given(req=requests)
    def test_every_field_survives_store_and_load(self, req, tmp_path):
        path = tmp_path / f"rt-{req.id}.duckdb"
        with Store.open(path) as store:
            assert store.add([req]) == 1
            back = store.get(req.id)
        path.unlink()
        assert back == req

    def test_body_key_order_is_kept(self):
        body = {"tools": [{"name": "t", "input_schema": {"properties": {"b": 1, "a": 2}}}],
                "messages": []}
        with Store.open(Path("k.duckdb")) as store:
            store.add([make_request("r", body=body)])
            back = store.get("r").body
        assert list(back["tools"][0]["input_schema"]["properties"]) == ["b", "a"]

    @settings(max_examples=30, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(reqs=st.lists(requests, min_size=1, max_size=6, unique_by=lambda r: r.id),
           picks=st.lists(st.integers(0, 7), max_size=12), batch=st.integers(1, 4))
    def test_iter_ids_gives_each_stored_request_asked_for_in_the_order_asked(
            self, reqs, picks, batch, tmp_path):
        # picks past the stored requests name ids that are not in the store
        asked = [reqs[i].id if i < len(reqs) else f"absent-{i}" for i in picks]
        path = tmp_path / f"ids-{reqs[0].id}.duckdb"
        with Store.open(path) as store:
            store.add(reqs)
            got = list(store.iter_ids(asked, batch=batch))
            # one by one (`get`: its own query, a row and its body joined)
            want = [store.get(rid) for rid in asked if not rid.startswith("absent-")]
        path.unlink()
        assert got == want


class TestDedupe:
    def test_same_ids_are_added_once(self):
        reqs = [make_request(f"r{i}", body=anthropic_body(conversation(i + 1)))
                for i in range(3)]
        with Store.open(Path("d.duckdb")) as store:
            assert store.add(reqs) == 3
            assert store.add(reqs) == 0
            assert store.count() == 3

    def test_identical_bodies_are_stored_once(self):
        body = anthropic_body(conversation(2))
        with Store.open(Path("b.duckdb")) as store:
            store.add([make_request("r1", body=body), make_request("r2", body=body)])
            assert store.con.execute("select count(*) from bodies").fetchone()[0] == 1


class TestSchema:
    def test_new_store_is_at_current_version(self):
        with Store.open(Path("v.duckdb")) as store:
            assert store.con.execute("select max(version) from schema_version").fetchone()[0] \
                == SCHEMA_VERSION

    def test_reopening_does_not_migrate_twice(self):
        Store.open(Path("v.duckdb")).close()
        with Store.open(Path("v.duckdb")) as store:
            assert store.con.execute("select count(*) from schema_version").fetchone()[0] \
                == SCHEMA_VERSION

    def test_foreign_duckdb_file_is_refused(self):
        con = duckdb.connect("other.duckdb")
        con.execute("create table t(x int)")
        con.close()
        with pytest.raises(StoreError, match="not a prefixscope store"):
            Store.open(Path("other.duckdb"))

    def test_read_only_open_of_missing_store_fails_clearly(self):
        with pytest.raises(StoreError, match="no store"):
            Store.open(Path("missing.duckdb"), read_only=True)


class TestResolve:
    def test_prefix_and_native_id_resolve(self):
        with Store.open(Path("r.duckdb")) as store:
            store.add([make_request("abcdef123", native_id="msg_1"),
                       make_request("abc999", native_id="msg_2")])
            assert store.resolve_id("abcdef") == "abcdef123"
            assert store.resolve_id("msg_2") == "abc999"
            with pytest.raises(KeyError, match="ambiguous"):
                store.resolve_id("abc")


class TestStoredLayouts:
    def test_skeleton_layout_and_parts_give_the_body_back(self, tmp_path):
        from prefixscope.store.load import ingest_paths
        from prefixscope.store.parts import join_body

        store = Store.open(tmp_path / "s.duckdb")
        ingest_paths([str(ROOT / "sample_logs")], store)
        whole = list(store.iter_requests())
        stored = list(store.iter_layouts(batch=7))
        assert [r.id for r in whole] == [r.id for r, _ in stored]
        layouts = [layout for _, layout in stored if layout]
        assert layouts and any(layout is None for _, layout in stored)
        for request, (skeleton, layout) in zip(whole, stored, strict=True):
            if layout is None:
                assert skeleton.body == request.body
                continue
            assert all(skeleton.body[name] == [] for name in layout)
            parts = store.parts_text([h for hs in layout.values() for h in hs])
            rebuilt = join_body(json.dumps(skeleton.body), json.dumps(layout), parts)
            assert rebuilt == request.body
            assert skeleton == replace(request, body=skeleton.body)

    @pytest.mark.parametrize("batch", [1, 3, 256])
    def test_streamed_bodies_sharing_parts_equal_bodies_read_one_by_one(self, tmp_path, batch):
        from prefixscope.store.load import ingest_paths

        store = Store.open(tmp_path / "s.duckdb")
        ingest_paths([str(ROOT / "sample_logs")], store)
        alone = {r.id: store.get(r.id).body for r in store.iter_requests()}
        assert [r.body for r in store.iter_requests(batch=batch)] == list(alone.values())
        jumbled = list(alone)[::-2] + list(alone)[::2]
        assert [r.body for r in store.iter_ids(jumbled, batch=batch)] == \
            [alone[i] for i in jumbled]

    def test_a_report_never_writes_to_the_bodies_it_reads(self, tmp_path, monkeypatch):
        """Streamed bodies share their parsed parts (`join_body`): a report, with
        what-ifs, leaves every part it was handed as parsed from its stored text."""
        import orjson

        import prefixscope.store.store as store_module
        from prefixscope import api
        from prefixscope.store.load import ingest_paths
        from prefixscope.store.parts import join_body

        texts: dict[str, str] = {}
        handed: list[tuple[str, object]] = []

        def recording(stored, layout_text, parts, values=None):
            body = join_body(stored, layout_text, parts, values)
            for name, hashes in (json.loads(layout_text) if layout_text else {}).items():
                for digest, element in zip(hashes, body[name], strict=True):
                    texts.setdefault(digest, parts.get(digest, ""))
                    handed.append((digest, element))
            return body

        monkeypatch.setattr(store_module, "join_body", recording)
        store = Store.open(tmp_path / "s.duckdb")
        ingest_paths([str(ROOT / "sample_logs")], store)
        store.close()
        api.report(tmp_path / "s.duckdb", workers=1,
                   what_if=["sort-json-keys", "strip-billing-header", "no-hoist"])
        assert len({id(element) for _, element in handed}) < len(handed)  # shared
        assert all(texts.values())
        for digest, element in handed:
            assert orjson.dumps(element) == orjson.dumps(orjson.loads(texts[digest])), digest

    def test_parts_text_leaves_out_what_it_does_not_hold(self, tmp_path):
        from prefixscope.store.load import ingest_paths

        store = Store.open(tmp_path / "s.duckdb")
        ingest_paths([str(ROOT / "sample_logs")], store)
        layout = next(layout for _, layout in store.iter_layouts() if layout)
        digest = next(iter(layout.values()))[0]
        assert set(store.parts_text([digest, "x3:absent"])) == {digest}
        assert store.parts_text([]) == {}
