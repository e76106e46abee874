"""One ingest classifies each input once (issue 38 items 2 and 3).

`prefixscope report LOGS` and ``ps.report(ps.ingest(LOGS, store=None))`` are one code path:
the ingest sniffs every file under LOGS once, stores the request logs and hands the engine
logs on with the kind they sniffed as; the report reads those (and any named with
``--engine-log`` / ``engine_logs=``) without sniffing them again. Before, `report LOGS`
walked and sniffed LOGS three times (the CLI's engine-log search, the ingest, the engine-log
analysis), and the library dropped the engine logs among its paths once one was named.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import REAL
from typer.testing import CliRunner

import prefixscope as ps
from prefixscope.cli.main import app
from prefixscope.ingest.engine_logs import EngineLogInput

runner = CliRunner()

REQUESTS = REAL / "claude-code-jsonl" / "claude-code-log__representative_messages.jsonl"
VLLM = REAL / "engine_logs" / "vllm-43295-kv-pressure.log"
NAMED = REAL / "engine_logs" / "sglang-36081-swa-prefill.log"  # given by name, not in LOGS


@pytest.fixture
def logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """logs/: a Claude Code session log and a vLLM server log (relative: names as given)."""
    (tmp_path / "logs").mkdir()
    for source in (REQUESTS, VLLM):
        shutil.copy(source, tmp_path / "logs" / source.name)
    monkeypatch.chdir(tmp_path)
    return Path("logs")


def sniffs(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts, by file name, every probe of a file's head (what every format's sniff and
    the engine-log sniff read) from now on."""
    import prefixscope.analyses.engine_cache  # noqa: F401 - bound below before it runs
    import prefixscope.store.load  # noqa: F401
    from prefixscope.ingest import probing, source

    counts: Counter[str] = Counter()
    probe = probing.probe

    def counting(src: source.Source) -> source.Probe:
        counts[src.name] += 1
        return probe(src)

    for name, module in list(sys.modules.items()):
        if name.startswith("prefixscope") and getattr(module, "probe", None) is probe:
            monkeypatch.setattr(module, "probe", counting)
    return counts


def test_the_ingest_hands_the_engine_logs_on_with_their_kind(logs: Path) -> None:
    with ps.ingest([str(logs)], store=None) as st:
        result = st.ingest_result
        assert result is not None
        assert result.engine_logs == (str(logs / VLLM.name),)
        assert result.engine_inputs == (EngineLogInput(logs / VLLM.name, "vllm"),)
        assert result.ingested > 0 and result.skipped == 0


def test_report_of_logs_and_the_library_give_the_same_json(logs: Path) -> None:
    """A vLLM log among LOGS and an SGLang log named besides: both read by both."""
    printed = runner.invoke(app, ["report", str(logs), "--json", "--engine-log", str(NAMED)])
    assert printed.exit_code == 0, printed.output
    with ps.ingest([str(logs)], store=None) as st:
        library = ps.report(st, engine_logs=[NAMED])
    assert json.loads(printed.stdout) == json.loads(
        json.dumps(library.to_dict(), ensure_ascii=False, default=str))
    # both engine logs were read, each as what it is (tests/data/real/README.md)
    engine = library.evidence.engine_log if library.evidence is not None else None
    assert engine is not None
    assert dict(engine.kinds) == {str(logs / VLLM.name): "vllm", str(NAMED): "sglang"}


def test_report_of_logs_sniffs_each_file_once(logs: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    counts = sniffs(monkeypatch)
    result = runner.invoke(app, ["report", str(logs), "--json", "--engine-log", str(NAMED)])
    assert result.exit_code == 0, result.output
    assert counts == {str(logs / REQUESTS.name): 1, str(logs / VLLM.name): 1,
                      str(NAMED): 1}


def test_the_library_sniffs_each_file_once(logs: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    counts = sniffs(monkeypatch)
    with ps.ingest([str(logs)], store=None) as st:
        ps.report(st)
    assert counts == {str(logs / REQUESTS.name): 1, str(logs / VLLM.name): 1}


def test_engine_log_of_a_folder_sniffs_each_file_once(logs: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    counts = sniffs(monkeypatch)
    result = runner.invoke(app, ["engine-log", str(logs), "--json"])
    assert result.exit_code == 0, result.output
    assert counts == {str(logs / REQUESTS.name): 1, str(logs / VLLM.name): 1}


def test_an_engine_log_among_logs_named_again_is_read_once(logs: Path) -> None:
    """Named again by its absolute path, the vLLM log is still one file: its 5 stats lines
    (tests/data/real/README.md) counted once, not 10."""
    with ps.ingest([str(logs)], store=None) as st:
        library = ps.report(st, engine_logs=[(logs / VLLM.name).resolve()])
    engine = library.evidence.engine_log if library.evidence is not None else None
    assert engine is not None
    assert (engine.files, len(engine.series)) == ((str(logs / VLLM.name),), 5)
