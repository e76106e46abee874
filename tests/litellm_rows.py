"""LiteLLM spend-log rows with hand-chosen usage, one per call, for the tests of sessions
spread over backends (tests/test_routing.py, tests/test_pin_backend.py): a call ``i`` of a
session starts ``i`` minutes after T0, on the deployment (``model_id``) given."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

T0 = datetime(2026, 3, 2, 10, 0)
MODEL = "claude-sonnet-4-5-20250929"


def spend_row(session: str, i: int, backend: str, prompt: int, read: int, write: int,
              model: str = MODEL) -> dict:
    return {
        "request_id": f"{session}-{i}", "call_type": "anthropic_messages", "spend": 0.0,
        "startTime": (T0 + timedelta(minutes=i)).isoformat() + "Z",
        "endTime": (T0 + timedelta(minutes=i, seconds=5)).isoformat() + "Z",
        "model": model, "model_group": model, "model_id": backend,
        "custom_llm_provider": "anthropic", "api_base": "https://api.anthropic.com/v1/messages",
        "prompt_tokens": prompt, "completion_tokens": 100, "total_tokens": prompt + 100,
        "metadata": {"additional_usage_values": {"cache_read_input_tokens": read,
                                                 "cache_creation_input_tokens": write}},
        "session_id": session, "status": "success", "cache_hit": "False",
    }


def spend_log(path: Path, sessions: dict[str, tuple[tuple[str, int, int, int], ...]]) -> Path:
    """The sessions' calls (backend, prompt, read, write) as a JSON-lines spend log."""
    rows = [spend_row(name, i, *call) for name, calls in sessions.items()
            for i, call in enumerate(calls)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path
