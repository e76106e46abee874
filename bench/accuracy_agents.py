"""Agent-log corpora for bench/accuracy.py (issue 35, item 8): Codex CLI rollouts and Cline
task folders, written as those clients write them, with an answer key from the generator's
own cache. Like bench/accuracy.py it never imports prefixscope: plain Python, json, and a
seeded random. docs/accuracy.md describes both corpora; `python bench/accuracy.py
--formats codex,cline` runs them.

* ``codex``: one rollout per session (``sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``):
  ``session_meta`` (``cli_version``, ``base_instructions``), a ``turn_context`` per user
  turn (``model``, ``effort``), ``response_item`` lines (messages, encrypted reasoning,
  function calls and their outputs), an ``event_msg`` ``token_count`` per model call
  (``last_token_usage.input_tokens`` / ``cached_input_tokens``, cumulative
  ``total_token_usage``), and the records Codex writes for what changed: a resume by
  another release (a second ``session_meta`` of the same id with another ``cli_version``
  and its ``base_instructions``), ``compacted`` (with ``replacement_history``) and its
  ``context_compacted`` event. The provider: OpenAI's hosted cache as the openai-hosted
  corpus models it (128-token steps from 1,024 tokens, kept while used within 10 minutes),
  one cache per model and reasoning effort (the effort is in the prompt's header), shared
  by every session (so the instructions and tools of a release stay warm). What the
  server counts: the instructions, the tools, and the input items -- the reasoning items
  of the current user turn only (the Responses API drops those before the last user
  message: a new user turn after a turn that sent reasoning shrinks the prompt where
  the first of them sat, a ``history-rewrite``).
* ``cline``: one task folder per session (``tasks/<ms>/``: ``ui_messages.json`` with an
  ``api_req_started`` message per call -- ``tokensIn``, ``tokensOut``, ``cacheWrites``,
  ``cacheReads``, ``cost`` -- and the ``conversationHistoryDeletedRange`` in force on every
  message; ``api_conversation_history.json``, the whole history; ``task_metadata.json``
  with ``model_usage`` and ``environment_history``). The provider: Anthropic's cache as
  the Claude Code corpus models it, with Cline's breakpoints: the end of the system prompt
  (its tools are in it) and the last two user messages, the last one's entry ending
  ``CLINE_LAG`` tokens before the prompt (``tokensIn``); 5 minutes from the last write or
  read. Cline's truncation (``getNextTruncationRange``: keep the first user / assistant
  pair, drop half of the rest, stamped on the messages after the request that applied it)
  and its condense (the model's ``summarize_task`` call: Cline shows it as a ``tool`` say
  ``summarizeTask``, then drops everything but the first pair and the summarizing
  exchange, keep "none"; the request after it sends the continuation prompt) are what it
  records; a truncation also adds Cline's notice to the first assistant message as sent.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import accuracy as acc

TOKEN = re.compile(r"\w+|[^\w\s]+")

# ------------------------------------------------------------------ Codex

CODEX_VERSIONS = ("0.63.0", "0.64.0", "0.65.0")
CODEX_MODELS = ("gpt-5.1-codex", "gpt-5.1-codex-max")
EFFORTS = ("medium", "high", "low")
CODEX_CWD = "/home/dev/acc"
ENVIRONMENT = (f"<environment_context>\n  <cwd>{CODEX_CWD}</cwd>\n  <approval_policy>on-request"
               "</approval_policy>\n  <sandbox_mode>workspace-write</sandbox_mode>\n  "
               "<network_access>restricted</network_access>\n  <shell>bash</shell>\n"
               "</environment_context>")
SUMMARY_PREFIX = ("Another language model started to solve this problem and produced a "
                  "summary of its thinking process. You also have access to the state of "
                  "the tools that were used by that language model. Use this to build on the "
                  "work that has already been done and avoid duplicating work. Here is the "
                  "summary produced by the other language model, use the information in this "
                  "summary to assist with your own analysis:")
# Turn kinds: a call of one of these starts a new user turn (the others continue a turn
# with a tool's output).
NEW_TURN = ("history-rewrite", "model-change", "settings-change", "client-upgrade",
            "compaction")
CODEX_WEIGHTS = {"append": 48, "ttl": 9, "provider": 6, "history-rewrite": 10,
                 "model-change": 4, "settings-change": 4, "client-upgrade": 4,
                 "compaction": 4}


@dataclass
class AgentCall(acc.Call):
    """A call of an agent-log corpus: its server tokens (Codex) and the log lines written
    before it (`lines`, each a dict with its time in `_t`)."""

    tokens: list[str] = field(default_factory=list)
    lines: list[dict[str, Any]] = field(default_factory=list)
    effort: str = ""
    output_tokens: int = 0
    # Cline: the range in force when its api_req_started was written, and after its setup
    range_before: tuple[int, int] | None = None
    range_after: tuple[int, int] | None = None
    history_index: int = -1  # Cline's conversationHistoryIndex of its api_req_started
    ui: list[dict[str, Any]] = field(default_factory=list)  # Cline: its answer's messages


def codex_instructions(version: str) -> str:
    rng = random.Random(f"codex-instructions:{version}")
    n = 2200 + 120 * CODEX_VERSIONS.index(version)
    return ("You are Codex, based on GPT-5. You are running as a coding agent in the Codex "
            "CLI on a user's computer.\n" + " ".join(rng.choice(acc.WORDS) for _ in range(n)))


def codex_tools(version: str) -> list[dict[str, Any]]:
    names = ["shell", "apply_patch", "update_plan", "view_image"]
    if CODEX_VERSIONS.index(version) >= 1:
        names.append("list_mcp_resources")
    tools = []
    for name in names:
        rng = random.Random(f"codex-tool:{name}:{version}")
        tools.append({"type": "function", "name": name,
                      "description": acc.words(f"{name}:{version}", rng.randint(150, 400)),
                      "strict": False,
                      "parameters": {"type": "object", "properties": {
                          f"{rng.choice(acc.WORDS)}_{i}": {"type": "string"}
                          for i in range(rng.randint(1, 3))}}})
    return tools


_PREAMBLE: dict[str, list[str]] = {}


def preamble(version: str) -> list[str]:
    """The server's tokens of a release's instructions and tools (before the input)."""
    if version not in _PREAMBLE:
        _PREAMBLE[version] = [*TOKEN.findall(codex_instructions(version)),
                              *TOKEN.findall(json.dumps(codex_tools(version)))]
    return _PREAMBLE[version]


def message_item(role: str, text: str) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


@dataclass
class Item:
    """A Responses API input item as logged, and the tokens the server counts for it."""

    payload: dict[str, Any]
    tokens: list[str]

    @property
    def reasoning(self) -> bool:
        return self.payload["type"] == "reasoning"

    @property
    def boundary(self) -> bool:
        """A user message that starts a turn (not the context Codex injects)."""
        p = self.payload
        return (p["type"] == "message" and p["role"] == "user"
                and not p["content"][0]["text"].startswith("<environment_context>"))


def make_item(payload: dict[str, Any], hidden: int = 0) -> Item:
    kind = payload["type"]
    if kind == "message":
        text = "".join(c["text"] for c in payload["content"])
        tokens = ["<|im_start|>", payload["role"], *TOKEN.findall(text), "<|im_end|>"]
    elif kind == "reasoning":  # encrypted: the log has its summary, the server its tokens
        tokens = [f"<r:{payload['encrypted_content']}:{k}>" for k in range(hidden)]
    elif kind == "function_call":
        tokens = ["<call>", payload["name"], *TOKEN.findall(payload["arguments"])]
    else:  # function_call_output
        tokens = ["<out>", *TOKEN.findall(payload["output"])]
    return Item(payload, tokens)


def sent_items(items: list[Item]) -> list[Item]:
    """What the server reads of the history: reasoning only after the last user turn
    boundary."""
    last = max((i for i, it in enumerate(items) if it.boundary), default=-1)
    return [it for i, it in enumerate(items) if i > last or not it.reasoning]


def plan_codex(rng: random.Random, sid: str, start: float, turns: int) -> list[AgentCall]:
    """One Codex session's calls in order, each with its server tokens and the rollout lines
    logged before its token_count."""
    version = CODEX_VERSIONS[0] if rng.random() < 0.6 else CODEX_VERSIONS[1]
    model = CODEX_MODELS[0] if rng.random() < 0.7 else CODEX_MODELS[1]
    effort = EFFORTS[0] if rng.random() < 0.7 else EFFORTS[1]
    t = round(start, 3)
    items: list[Item] = []
    serial = 0
    kinds_, weights = zip(*CODEX_WEIGHTS.items(), strict=True)
    kinds = ["cold"] + [rng.choices(kinds_, weights)[0] for _ in range(1, turns)]
    # a session's first turn, its later turns' starts: every few calls the agent answers and
    # the user asks again (an `append` there is a new turn too)
    new_turn = [k in NEW_TURN or (k == "append" and rng.random() < 0.15) for k in kinds]

    def meta(at: float, v: str) -> dict[str, Any]:
        return {"_t": at, "type": "session_meta", "payload": {
            "id": sid, "timestamp": acc.stamp(at), "cwd": CODEX_CWD,
            "originator": "codex_cli_rs", "cli_version": v, "instructions": None,
            "source": "cli", "model_provider": "openai",
            "base_instructions": {"text": codex_instructions(v)},
            "git": {"commit_hash": "3f9a1c2", "branch": "main",
                    "repository_url": "git@github.com:dev/acc.git"}}}

    def turn_context(at: float) -> dict[str, Any]:
        return {"_t": at, "type": "turn_context", "payload": {
            "cwd": CODEX_CWD, "approval_policy": "on-request",
            "sandbox_policy": {"type": "workspace-write", "network_access": False,
                               "exclude_tmpdir_env_var": False, "exclude_slash_tmp": False},
            "model": model, "effort": effort, "summary": "auto"}}

    def user_turn(at: float, text: str) -> list[dict[str, Any]]:
        item = make_item(message_item("user", text))
        items.append(item)
        return [turn_context(at), {"_t": at + 0.01, "type": "response_item",
                                   "payload": item.payload},
                {"_t": at + 0.02, "type": "event_msg", "payload": {
                    "type": "user_message", "message": text, "images": []}}]

    env = make_item(message_item("user", ENVIRONMENT))
    items.append(env)
    pending: list[dict[str, Any]] = [
        meta(t - 2, version),
        {"_t": t - 1.99, "type": "response_item", "payload": env.payload},
        *user_turn(t - 1.9, acc.words(f"{sid}:task", rng.randint(200, 3000)))]
    calls: list[AgentCall] = []
    for index, kind in enumerate(kinds):
        gap = None
        if index:
            gap = rng.uniform(4, 200)
            if kind == "append" and not new_turn[index] and rng.random() < 0.2:
                gap = rng.uniform(acc.OPENAI_TTL - 15, acc.OPENAI_TTL - 1)
            if kind == "ttl":
                gap = rng.uniform(acc.OPENAI_TTL + 1, acc.OPENAI_TTL + 30) \
                    if rng.random() < 0.3 else rng.uniform(630, 3000)
            t = round(t + gap, 3)
            at = t - 6
            if new_turn[index]:
                if kind == "compaction":
                    users = [it for it in items if it.boundary]
                    summary = SUMMARY_PREFIX + "\n" + acc.words(f"{sid}:summary{index}",
                                                                rng.randint(800, 3000))
                    replacement = [env, *users[-2:], make_item(message_item("user",
                                                                            summary))]
                    items[:] = replacement
                    pending += [
                        {"_t": at - 1, "type": "compacted", "payload": {
                            "message": summary,
                            "replacement_history": [it.payload for it in replacement]}},
                        {"_t": at - 0.99, "type": "event_msg",
                         "payload": {"type": "context_compacted"}}]
                elif kind == "model-change":
                    model = CODEX_MODELS[1] if model == CODEX_MODELS[0] else CODEX_MODELS[0]
                elif kind == "settings-change":
                    effort = rng.choice([e for e in EFFORTS if e != effort])
                elif kind == "client-upgrade":
                    later = [v for v in CODEX_VERSIONS
                             if CODEX_VERSIONS.index(v) > CODEX_VERSIONS.index(version)]
                    if later:
                        version = later[0]
                        pending.append(meta(at - 1, version))
                    else:
                        kind = "history-rewrite"
                pending += user_turn(at, acc.words(f"{sid}:ask{index}",
                                                   rng.randint(20, 400)))
        sent = sent_items(items)
        tokens = [*preamble(version), *(x for it in sent for x in it.tokens)]
        # the call's output: reasoning (most calls), then a tool call, or the turn's answer
        # when the next call starts a new turn
        outputs: list[Item] = []
        serial += 1
        if rng.random() < 0.85:
            outputs.append(make_item({"type": "reasoning", "summary": [
                {"type": "summary_text", "text": "**" + acc.words(f"{sid}{serial}s", 4)
                 + "**"}], "content": None,
                "encrypted_content": f"gAAAAB{sid[:8]}{serial:04d}"},
                hidden=rng.randint(60, 700)))
        last = index + 1 >= len(kinds) or new_turn[index + 1]
        if last:
            outputs.append(make_item(message_item("assistant", acc.words(
                f"{sid}{serial}m", rng.randint(20, 200)))))
        else:
            outputs.append(make_item({"type": "function_call", "name": "shell",
                                      "arguments": json.dumps({"command": [
                                          "bash", "-lc", acc.words(f"{sid}{serial}c", 6)]}),
                                      "call_id": f"call_{sid[:6]}{serial:04d}"}))
        out_lines = [{"_t": t - 0.5 + 0.01 * k, "type": "response_item",
                      "payload": it.payload} for k, it in enumerate(outputs)]
        call = AgentCall(sid, index, t, kind, model, version, acc.OPENAI_TTL, [],
                         gap=gap, tokens=tokens, lines=pending + out_lines, effort=effort,
                         output_tokens=sum(len(it.tokens) for it in outputs))
        calls.append(call)
        items.extend(outputs)
        pending = []
        if not last:  # the tool's output, logged before the next call
            out = make_item({"type": "function_call_output",
                             "call_id": outputs[-1].payload["call_id"],
                             "output": acc.words(f"{sid}{serial}o", rng.choice((
                                 rng.randint(120, 900), rng.randint(900, 6000))))})
            items.append(out)
            pending.append({"_t": t + 1, "type": "response_item", "payload": out.payload})
    return calls


def step_hashes(tokens: list[str], seed: Any) -> list[int]:
    out, h = [], hash(seed)
    for i in range(0, len(tokens) - acc.OPENAI_STEP + 1, acc.OPENAI_STEP):
        h = hash((h, *tokens[i:i + acc.OPENAI_STEP]))
        out.append(h)
    return out


def simulate_codex(calls: list[AgentCall], rng: random.Random) -> None:
    """OpenAI's hosted cache, per (model, effort): 128-token steps from 1,024 tokens, each
    kept while used within 10 minutes; the key as docs/accuracy.md gives it."""
    used: dict[int, float] = {}
    previous: dict[str, AgentCall] = {}
    for call in sorted(calls, key=lambda c: (c.time, c.session)):
        call.prompt = len(call.tokens)
        steps = step_hashes(call.tokens, (call.model, call.effort))
        n = 0
        while n < len(steps) and n * acc.OPENAI_STEP < call.prompt - 1 \
                and steps[n] in used and call.time - used[steps[n]] <= acc.OPENAI_TTL:
            n += 1
        if n * acc.OPENAI_STEP < acc.OPENAI_MIN:
            n = 0
        if call.kind == "provider":
            low = acc.OPENAI_MIN // acc.OPENAI_STEP
            n = rng.choice([0, *range(low, max(low, n - 1))])
        for h in steps:
            used[h] = call.time
        call.read = n * acc.OPENAI_STEP
        before = previous.get(call.session)
        previous[call.session] = call
        if before is None:
            call.true_tokens = call.prompt - call.read
            continue
        extends = call.tokens[:before.prompt] == before.tokens
        if call.kind in ("append", "history-rewrite"):
            # a new user turn drops the reasoning the previous call sent, if it sent any
            call.kind = "append" if extends else "history-rewrite"
        if call.kind in ("append", "ttl", "provider"):
            assert extends, (call.session, call.index)
            warm = before.prompt // acc.OPENAI_STEP * acc.OPENAI_STEP
            warm = warm if warm >= acc.OPENAI_MIN else 0
            call.true_tokens = max(0, warm - call.read)
            if call.kind == "append":
                assert call.true_tokens == 0, (call.session, call.index)
            elif call.true_tokens == 0:
                call.kind = "append"
        elif call.kind == "compaction":
            call.true_tokens = call.prompt - call.read
        else:
            # a recorded change: what was sent before and not read (the log cannot place
            # the change; the ledger's D = C, as for Claude Code's recorded changes)
            call.true_tokens = max(0, min(call.prompt, before.prompt) - call.read)
            if call.true_tokens == 0:
                call.kind = "append"


def write_codex(calls: list[AgentCall], out: Path) -> list[Path]:
    """One rollout per session under sessions/YYYY/MM/DD/ (Codex's layout)."""
    by_session: dict[str, list[AgentCall]] = {}
    for call in sorted(calls, key=lambda c: (c.session, c.index)):
        by_session.setdefault(call.session, []).append(call)
    paths = []
    for sid, mine in by_session.items():
        first = acc.EPOCH + acc.timedelta(seconds=mine[0].lines[0]["_t"])
        folder = out / "codex" / "sessions" / first.strftime("%Y/%m/%d")
        folder.mkdir(parents=True, exist_ok=True)
        lines: list[dict[str, Any]] = []
        total = [0, 0, 0, 0, 0]
        for call in mine:
            lines += call.lines
            last = [call.prompt, call.read, call.output_tokens,
                    call.output_tokens // 2, call.prompt + call.output_tokens]
            total = [a + b for a, b in zip(total, last, strict=True)]
            names = ("input_tokens", "cached_input_tokens", "output_tokens",
                     "reasoning_output_tokens", "total_tokens")
            lines.append({"_t": call.time, "type": "event_msg", "payload": {
                "type": "token_count", "info": {
                    "total_token_usage": dict(zip(names, total, strict=True)),
                    "last_token_usage": dict(zip(names, last, strict=True)),
                    "model_context_window": 272000},
                "rate_limits": {"primary": {"used_percent": 4.0, "window_minutes": 300,
                                            "resets_in_seconds": 9000},
                                "secondary": {"used_percent": 1.0, "window_minutes": 10080,
                                              "resets_in_seconds": 500000}}}})
        text = "".join(json.dumps({"timestamp": acc.stamp(x["_t"]), "type": x["type"],
                                   "payload": x["payload"]}, separators=(",", ":")) + "\n"
                       for x in lines)
        path = folder / f"rollout-{first.strftime('%Y-%m-%dT%H-%M-%S')}-{sid}.jsonl"
        path.write_text(text)
        paths.append(path)
    return paths


def generate_codex(seed: int, sessions: int) -> list[AgentCall]:
    rng = random.Random(f"{seed}:codex")
    calls: list[AgentCall] = []
    for n in range(sessions):
        a, b, c, d, e = (rng.getrandbits(k) for k in (32, 16, 12, 12, 48))
        sid = f"{a:08x}-{b:04x}-7{c:03x}-8{d:03x}-{e:012x}"
        start = rng.uniform(0, 3600) + n * 30
        calls += plan_codex(rng, sid, start, rng.randint(12, 36))
    simulate_codex(calls, rng)
    return calls


# ------------------------------------------------------------------ Cline

CLINE_VERSIONS = ("3.51.0", "3.52.1")
CLINE_LAG = 4  # tokensIn: the tokens after the last breakpoint, never cached
CLINE_WEIGHTS = {"append": 52, "ttl": 9, "provider": 7, "truncation": 6, "compaction": 5,
                 "model-change": 6}
TRUNCATION_NOTICE = ("[NOTE] Some previous conversation history with the user has been "
                     "removed to maintain optimal context window length. The initial user "
                     "task has been retained for continuity, while intermediate conversation "
                     "history has been removed. Keep this in mind as you continue assisting "
                     "the user. Pay special attention to the user's latest messages.")
CONTINUATION = ("This session is being continued from a previous conversation that ran out "
                "of context. The conversation is summarized below:\n")
SUMMARIZE = ("<explicit_instructions type=\"summarize_task\">\nThe current conversation is "
             "rapidly running out of context. Now, your urgent task is to create a "
             "comprehensive detailed summary of the conversation so far, calling the "
             "summarize_task tool.\n</explicit_instructions>")
TASK_EPOCH_MS = int(acc.EPOCH.timestamp() * 1000)


def ms(seconds: float) -> int:
    return TASK_EPOCH_MS + round(seconds * 1000)


def cline_system(version: str) -> acc.Chunk:
    cid = f"cline-system:{version}"
    if cid not in acc._SHARED:
        rng = random.Random(cid)
        n = 7600 + 200 * CLINE_VERSIONS.index(version)
        text = ("You are Cline, a highly skilled software engineer with extensive knowledge "
                "in many programming languages, frameworks, design patterns, and best "
                "practices.\n\n====\n\nTOOL USE\n\n"
                + " ".join(rng.choice(acc.WORDS) for _ in range(n)))
        acc._SHARED[cid] = acc.make_chunk(cid, "system", [{"type": "text", "text": text}])
    return acc._SHARED[cid]


def cline_message(cid: str, role: str, texts: list[str]) -> acc.Chunk:
    """One API message as a chunk (Cline's history: one message each)."""
    return acc.make_chunk(cid, "messages", [{"role": role, "content": [
        {"type": "text", "text": x} for x in texts]}])


def environment_details(mode: str) -> str:
    return (f"<environment_details>\n# Current Mode\n{mode.upper()} MODE\n"
            "</environment_details>")


def truncation_range(length: int, current: tuple[int, int] | None, keep: str,
                     roles: list[str]) -> tuple[int, int]:
    """Cline's `getNextTruncationRange`: keep messages 0 and 1, remove an even number after
    the current range ("half" of the rest, or "none" of it), ending on an assistant
    message."""
    start = current[1] + 1 if current else 2
    remove = max(length - start, 0) if keep == "none" else (length - start) // 4 * 2
    end = start + remove - 1
    if end >= length or roles[end] != "assistant":
        end -= 1
    return 2, end


def plan_cline(rng: random.Random, task: str, start: float, turns: int) -> list[AgentCall]:
    version = CLINE_VERSIONS[0] if rng.random() < 0.6 else CLINE_VERSIONS[1]
    model = acc.MODELS[0] if rng.random() < 0.7 else acc.MODELS[1]
    mode = "act"
    system = cline_system(version)
    history: list[acc.Chunk] = []  # the whole API history (as api_conversation_history.json)
    deleted: tuple[int, int] | None = None
    notice: acc.Chunk | None = None  # message 1 as sent after the first truncation
    t = round(start, 3)
    kinds_, weights = zip(*CLINE_WEIGHTS.items(), strict=True)
    kinds = ["cold"] + [rng.choices(kinds_, weights)[0] for _ in range(1, turns)]
    # a condense takes two calls: the one asked to summarize (an append), then the one
    # after it (the compaction)
    for i in range(1, len(kinds)):
        if kinds[i] == "compaction" and (i < 3 or kinds[i - 1] != "append"):
            kinds[i] = "append"
    calls: list[AgentCall] = []
    user_texts = [f"<task>\n{acc.words(f'{task}:task', rng.randint(200, 3000))}\n</task>",
                  environment_details(mode)]
    serial = 0
    for index, kind in enumerate(kinds):
        gap = None
        range_before = deleted
        if index:
            gap = rng.uniform(4, 200)
            if kind == "append" and rng.random() < 0.2:
                gap = rng.uniform(acc.FIVE_MIN - 15, acc.FIVE_MIN - 1)
            if kind == "ttl":
                gap = rng.uniform(acc.FIVE_MIN + 1, acc.FIVE_MIN + 30) \
                    if rng.random() < 0.3 else rng.uniform(330, 3000)
            t = round(t + gap, 3)
        summarizing = index + 1 < len(kinds) and kinds[index + 1] == "compaction"
        if kind == "model-change":
            model = acc.MODELS[1] if model == acc.MODELS[0] else acc.MODELS[0]
            mode = "plan" if mode == "act" else "act"
            user_texts = [*user_texts[:-1], environment_details(mode)]
        if summarizing:
            user_texts = [*user_texts[:-1], SUMMARIZE, user_texts[-1]]
        history_index = len(history) - 1
        history.append(cline_message(f"{task}:u{len(history)}", "user", user_texts))
        if kind == "truncation":
            roles = ["user" if i % 2 == 0 else "assistant" for i in range(len(history))]
            new = truncation_range(len(history), deleted, "half", roles)
            if new[1] < new[0] or (deleted is not None and new[1] <= deleted[1]):
                kind = "append"  # nothing left to drop
            else:
                deleted = new
        sent = list(history)
        if deleted is not None:
            if notice is None:
                first = history[1].payload[0]
                notice = cline_message(f"{task}:notice", "assistant", [
                    *(b["text"] for b in first["content"]), TRUNCATION_NOTICE])
            sent = [history[0], notice, *history[deleted[1] + 1:]]
        call = AgentCall(task, index, t, kind, model, version, acc.FIVE_MIN,
                         [system, *sent], gap=gap, range_before=range_before,
                         range_after=deleted, history_index=history_index)
        call.records = [{"mode": mode, "user_texts": list(user_texts)}]
        calls.append(call)
        # the answer: a tool call (text, as Cline's XML tools), or the summarize_task call
        serial += 1
        if summarizing:
            summary = acc.words(f"{task}:summary{index}", rng.randint(800, 3000))
            reply = [f"<summarize_task>\n<context>\n{summary}\n</context>\n</summarize_task>"]
            call.ui = [{"say": "tool", "text": json.dumps({"tool": "summarizeTask",
                                                           "content": summary})}]
            call.records[0]["answer"] = reply[0]
            history.append(cline_message(f"{task}:a{len(history)}", "assistant", reply))
            # the handler drops everything but the first pair (keep "none"; the history
            # then ends with the user message that asked for the summary)
            roles = ["user" if i % 2 == 0 else "assistant" for i in range(len(history) - 1)]
            deleted = truncation_range(len(history) - 1, deleted, "none", roles)
            user_texts = [f"[summarize_task] Result:\n{CONTINUATION}{summary}\n\nPlease "
                          "continue the conversation from where we left it off without "
                          "asking the user any further questions. Continue with the last "
                          "task that you were asked to work on.", environment_details(mode)]
            continue
        path = f"src/{acc.words(f'{task}{serial}p', 1)}_{serial}.py"
        reply = [f"<thinking>\n{acc.words(f'{task}{serial}a', rng.randint(20, 120))}\n"
                 f"</thinking>\n<read_file>\n<path>{path}</path>\n</read_file>"]
        call.ui = [{"say": "text", "text": acc.words(f"{task}{serial}a", 12)},
                   {"say": "tool", "text": json.dumps({"tool": "readFile", "path": path,
                                                       "content": path})}]
        call.records[0]["answer"] = reply[0]
        history.append(cline_message(f"{task}:a{len(history)}", "assistant", reply))
        n = rng.choice((rng.randint(120, 900), rng.randint(900, 6000)))
        user_texts = [f"[read_file for '{path}'] Result:",
                      acc.words(f"{task}{serial}u", n), environment_details(mode)]
    return calls


def simulate_cline(calls: list[AgentCall], rng: random.Random) -> None:
    """Anthropic's cache (bench/accuracy.py's HostedCache) at Cline's breakpoints: the end
    of the system prompt and of the last two user messages."""
    cache = acc.HostedCache()
    previous: dict[str, AgentCall] = {}
    for call in sorted(calls, key=lambda c: (c.time, c.session)):
        chunks = call.chunks
        call.prompt = sum(c.tokens for c in chunks)
        hit = cache.serve(call.model, chunks, call.time, call.kind == "provider", rng)
        call.read = hit
        call.write = call.prompt - CLINE_LAG - hit
        marks = sorted({1, len(chunks) - 2, len(chunks)} - {0, -1})
        write_cline(cache, call, marks)
        before = previous.get(call.session)
        previous[call.session] = call
        if before is None or call.kind == "compaction":
            call.true_tokens = call.prompt - hit
        elif call.kind in ("ttl", "provider", "append"):
            call.true_tokens = before.prompt - CLINE_LAG - hit
            if call.kind == "append":
                assert call.true_tokens == 0, (call.session, call.index)
            elif call.true_tokens <= 0:
                call.kind, call.true_tokens = "append", 0
        else:  # a recorded change: what was sent before and not read
            call.true_tokens = min(call.prompt, before.prompt) - hit


def write_cline(cache: acc.HostedCache, call: AgentCall, marks: list[int]) -> None:
    """The call's entries: every breakpoint's prefix, the last one `CLINE_LAG` short."""
    ids = tuple(c.cid for c in call.chunks)
    for n in marks:
        length = sum(c.tokens for c in call.chunks[:n])
        if n == len(call.chunks):
            length = call.prompt - CLINE_LAG
        key = (call.model, ids[:n])
        entry = cache.entries.get(key)
        if entry is None:
            cache.entries[key] = [length, call.time + call.ttl, call.ttl]
        else:
            entry[1] = max(entry[1], call.time + call.ttl)


def price(call: AgentCall) -> float:
    """Anthropic list price of the call (Sonnet 4.5 / Opus 4.5: input, 5-minute write,
    read, output per million), as Cline's `cost`."""
    rates = (3, 3.75, 0.3, 15) if "sonnet" in call.model else (5, 6.25, 0.5, 25)
    return round((CLINE_LAG * rates[0] + call.write * rates[1] + call.read * rates[2]
                  + 300 * rates[3]) / 1e6, 6)


def write_cline_tasks(calls: list[AgentCall], out: Path) -> list[Path]:
    """One task folder per session under globalStorage/saoudrizwan.claude-dev/tasks/."""
    by_task: dict[str, list[AgentCall]] = {}
    for call in sorted(calls, key=lambda c: (c.session, c.index)):
        by_task.setdefault(call.session, []).append(call)
    root = out / "cline" / "Code" / "User" / "globalStorage" / "saoudrizwan.claude-dev" / "tasks"
    paths = []
    for task, mine in by_task.items():
        folder = root / task
        folder.mkdir(parents=True, exist_ok=True)
        ui: list[dict[str, Any]] = []
        history: list[dict[str, Any]] = []
        model_usage: list[dict[str, Any]] = []
        start = mine[0].time

        def info(call: AgentCall) -> dict[str, Any]:
            mode = call.records[0]["mode"]
            return {"providerId": "anthropic", "modelId": call.model, "mode": mode}

        first = mine[0]
        ui.append({"ts": ms(start - 1), "type": "say", "say": "text",
                   "text": first.records[0]["user_texts"][0][7:-8], "images": [],
                   "files": [], "modelInfo": info(first), "conversationHistoryIndex": -1})
        for call in mine:
            if not model_usage or model_usage[-1]["model_id"] != call.model:
                model_usage.append({"ts": ms(call.time - 0.5), "model_id": call.model,
                                    "model_provider_id": "anthropic",
                                    "mode": call.records[0]["mode"]})
            request = "\n\n".join(call.records[0]["user_texts"][:1])[:200]
            started = {"ts": ms(call.time), "type": "say", "say": "api_req_started",
                       "text": json.dumps({"request": request, "tokensIn": CLINE_LAG,
                                           "tokensOut": 300, "cacheWrites": call.write,
                                           "cacheReads": call.read, "cost": price(call)}),
                       "modelInfo": info(call),
                       "conversationHistoryIndex": call.history_index}
            if call.range_before is not None:
                started["conversationHistoryDeletedRange"] = list(call.range_before)
            ui.append(started)
            # the API history: the call's user message, then its answer
            user_index = call.history_index + 1
            history.append({"role": "user", "content": [
                {"type": "text", "text": x} for x in call.records[0]["user_texts"]],
                "ts": ms(call.time - 0.2)})
            for k, say in enumerate(call.ui):
                message = {"ts": ms(call.time + 2 + k), "type": "say", **say,
                           "partial": False, "modelInfo": info(call),
                           "conversationHistoryIndex": user_index}
                if call.range_after is not None:  # set while the request was set up
                    message["conversationHistoryDeletedRange"] = list(call.range_after)
                ui.append(message)
        paths.append(folder / "ui_messages.json")
        _write_history(mine, folder, history)
        (folder / "ui_messages.json").write_text(json.dumps(ui, separators=(",", ":")))
        (folder / "task_metadata.json").write_text(json.dumps({
            "files_in_context": [], "model_usage": model_usage,
            "environment_history": [{"ts": ms(start - 1.5), "os_name": "linux",
                                     "os_version": "6.8.0", "os_arch": "x64",
                                     "host_name": "Visual Studio Code",
                                     "host_version": "1.105.1",
                                     "cline_version": mine[0].version}]}, indent=1))
    return paths


def _write_history(calls: list[AgentCall], folder: Path,
                   users: list[dict[str, Any]]) -> None:
    """api_conversation_history.json: each call's user message and the answer after it (the
    answer of call k is the message after its user message in the next call's history)."""
    out: list[dict[str, Any]] = []
    for k, call in enumerate(calls):
        out.append(users[k])
        answer = call.records[0].get("answer")
        if answer is not None:
            out.append({"role": "assistant", "content": [{"type": "text", "text": answer}],
                        "modelInfo": {"providerId": "anthropic", "modelId": call.model,
                                      "mode": call.records[0]["mode"]},
                        "metrics": {"tokens": {"prompt": CLINE_LAG, "completion": 300,
                                               "cached": call.read + call.write},
                                    "cost": price(call)},
                        "ts": ms(call.time + 1.5)})
    (folder / "api_conversation_history.json").write_text(json.dumps(out, indent=1))


def generate_cline(seed: int, sessions: int) -> list[AgentCall]:
    rng = random.Random(f"{seed}:cline")
    calls: list[AgentCall] = []
    for n in range(sessions):
        start = rng.uniform(0, 3600) + n * 30
        task = str(ms(start - 2))
        calls += plan_cline(rng, task, start, rng.randint(12, 36))
    simulate_cline(calls, rng)
    return calls


GENERATORS = {"codex": generate_codex, "cline": generate_cline}
WRITERS = {"codex": write_codex, "cline": write_cline_tasks}
WEIGHTS = {"codex": CODEX_WEIGHTS, "cline": CLINE_WEIGHTS}
