"""bench/gen_corpus.py's shapes are read as the real logs are: prefixscope finds in a small
generated corpus of each shape the bench runs (OpenAI Chat captures, a Claude Code projects
folder, a Codex sessions folder) exactly the calls the generator says it wrote (and, in the
agent logs, its sessions), in the format it names, nothing skipped; and bench/peer_feeds.py
writes each peer one record per call. The expected numbers are the generator's own counts,
not prefixscope's.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest
from conftest import ROOT

import prefixscope as ps

sys.path.insert(0, str(ROOT / "bench"))
import gen_corpus  # noqa: E402
import peer_feeds  # noqa: E402

# a small corpus: 5 sessions of 5 calls, prompts of 2,000 to 6,000 estimated tokens; every
# incident once (session 1 a volatile billing header, 2 shuffled tool keys, 4 compacted
# after its third call)
SMALL = {"seed": 5, "turns": 5, "min_tokens": 2_000, "max_tokens": 6_000, "sessions": 5}
# form -> (the format prefixscope must detect, whether its calls carry a body)
FORMS = {"openai": ("raw", True), "claude-code": ("claude-code", False),
         "codex": ("codex", True)}


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, int, int]]:
    """form -> (log, sessions, calls) as the generator reports them."""
    made = {}
    for form in FORMS:
        base = tmp_path_factory.mktemp(form)
        out = base / (form if form in gen_corpus.FOLDER_FORMS else f"{form}.jsonl")
        sessions, calls, _ = gen_corpus.generate(out, 0.0, form, **SMALL)
        made[form] = (out, sessions, calls)
    return made


@pytest.mark.parametrize("form", FORMS)
def test_prefixscope_reads_the_generators_calls(
        form: str, corpora: dict[str, tuple[Path, int, int]]) -> None:
    log, sessions, calls = corpora[form]
    fmt, with_body = FORMS[form]
    assert (sessions, calls) == (5, 25)
    with ps.ingest([str(log)], store=None) as store:
        got = store.ingest_result
    assert got.skipped == 0 and not got.errors and not got.unrecognized
    assert got.ingested == calls
    assert got.by_format == {fmt: calls}
    if form in gen_corpus.FOLDER_FORMS:  # an agent log names its sessions (captures are
        assert got.sessions == sessions  # threaded by their history, a heuristic)
    assert got.totals is not None and got.totals.with_body == (calls if with_body else 0)


def test_agent_logs_are_laid_out_as_the_clients_do(
        corpora: dict[str, tuple[Path, int, int]]) -> None:
    claude, _, _ = corpora["claude-code"]
    codex, _, _ = corpora["codex"]
    assert all(p.parent.parent.name == "projects" and p.parent.name.startswith("-home-dev-")
               for p in claude.rglob("*.jsonl"))
    assert len(list(claude.rglob("*.jsonl"))) == 5
    rollouts = list(codex.rglob("*.jsonl"))
    assert len(rollouts) == 5
    assert all(p.name.startswith("rollout-2026-09-01T") and
               p.relative_to(codex).parts[:4] == ("sessions", "2026", "09", "01")
               for p in rollouts)


@pytest.mark.parametrize("peer", peer_feeds.WRITERS)
@pytest.mark.parametrize("form", FORMS)
def test_each_peer_gets_one_record_per_call(
        peer: str, form: str, corpora: dict[str, tuple[Path, int, int]],
        tmp_path: Path) -> None:
    log, _, calls = corpora[form]
    out = tmp_path / "feed"
    if (peer.split("-")[0], form) in peer_feeds.CANNOT_READ:
        with pytest.raises(ValueError, match="no request bodies"):
            peer_feeds.convert(peer, form, log, out)
        return
    assert peer_feeds.convert(peer, form, log, out) == calls
    if peer == "llmtrafficlens":
        with out.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        assert len(rows) == calls
    else:
        assert len(out.read_bytes().splitlines()) == calls


def test_a_conversion_stops_past_its_size(corpora: dict[str, tuple[Path, int, int]],
                                          tmp_path: Path) -> None:
    log, _, _ = corpora["codex"]
    with pytest.raises(peer_feeds.TooLarge) as stopped:
        peer_feeds.convert("promptcachelint", "codex", log, tmp_path / "feed", max_bytes=1)
    assert stopped.value.records == 1


def test_the_table_says_what_a_peer_cannot_read() -> None:
    import bench_scale as bs

    gib = 2**30
    rows = [bs.Row(0.25, "floor (orjson)", 2.0, 0, gib, 2.0, "claude-code"),
            bs.Row(0.25, "report", 10.0, 2**29, gib, 16.0, "claude-code"),
            bs.Row(0.25, "prefixcash report (its call log, usage)", 1.0, 2**25, gib, 0.5,
                   "claude-code", (3.0, 1.5)),
            bs.Row(0.25, "promptcachelint report (its trace)", 0.0, 0, gib, form="claude-code",
                   note="cannot read: no request bodies in a Claude Code transcript")]
    assert bs.table(rows).splitlines()[2:] == [
        "| claude-code | 0.25 | 1.00 GiB | floor (orjson) | 2.0 | 2.0 | - | 2.0 | 1.0 | - |",
        "| claude-code | 0.25 | 1.00 GiB | report | 10.0 | 16.0 | 512 | 10.0 | 5.0 | - |",
        "| claude-code | 0.25 | 1.00 GiB | prefixcash report (its call log, usage) | 1.0 | 0.5 "
        "| 32 | 1.0 | 0.5 | 3.0 (1.5) |",
        "| claude-code | 0.25 | 1.00 GiB | promptcachelint report (its trace) | cannot read: no "
        "request bodies in a Claude Code transcript | - | - | - | - | - |"]
    assert bs.ratios(rows).splitlines()[2:] == [
        "| claude-code | 0.25 | report / prefixcash report (its call log, usage) | wall 10.00x "
        "(2.50x with its conversion), CPU 32.00x (8.00x with its conversion) |",
        "| claude-code | 0.25 | report / promptcachelint report (its trace) | cannot read: no "
        "request bodies in a Claude Code transcript |",
        "| claude-code | 0.25 | report / floor (orjson) | 5.0x |"]


def test_the_ratios_of_a_long_session_diff_against_the_naive_way_and_the_floor() -> None:
    """Issue 37 item 4's row: diff --all over the naive way run on every request, and over
    the floor, wall and CPU (a shared machine's wall says little)."""
    import bench_scale as bs

    gib = 2**30
    rows = [bs.Row(0.078, "floor (orjson)", 0.5, 0, gib, 0.25),
            bs.Row(0.078, "diff --all", 4.0, 2**28, gib, 2.0),
            bs.Row(0.078, "diff --all (naive, all 240 requests)", 100.0, 0, gib, 50.0)]
    assert bs.ratios(rows).splitlines()[2:] == [
        "| raw | 0.078 | diff --all: naive / prefixscope | 25.0x (CPU 25.0x) |",
        "| raw | 0.078 | diff --all / floor (orjson) | 8.0x (CPU 8.0x) |"]
