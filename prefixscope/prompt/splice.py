"""Incremental rendering: a turn that appends messages is rendered as its predecessor's
text plus the new messages' part, for the chat templates this project wrote.

A session resends its whole history every turn, so rendering each request whole is
O(turns²) Jinja work per session (a 350-turn Codex session: ~55 ms a render, most of a
report). For a template T, a conversation C and its predecessor's A = C[:n] (same tools),
the rendered text of C is written

    T(C) = T(A)[:-|G|] + tail        G: the generation prompt T(A) ends with

and the tail is taken from two renders of a *reduced* conversation: ``R_A = [C[i] for i in
ctx]`` (a few messages of A the new part depends on) and ``R_B = R_A + C[n:]``::

    tail = T(R_B)[|T(R_A)| - |G|:]

This holds when T's output for the messages before n does not depend on what follows
them, and the new messages' part depends on A only through the messages in ctx. Which
messages those are, and when it does not hold, is a property of each template, proved
below (`SPLICES`) against the template's source; when a rule's precondition fails the
request is rendered whole. Whatever the rule says, three cheap checks guard every splice
(`render.render_turn`): T(A) and T(R_A) end with G, T(R_B) starts with T(R_A)[:-|G|], and
both renders of R are balanced (no mark open at the cut). tests/test_splice.py holds the
splice equal to the whole render (text and segments) on Hypothesis conversations for every
bundled template and on every consecutive pair of the bundled and real corpora.

**The tools.** Every template of `SPLICES` reads ``tools`` in its head only, before its
loop over the messages (the loop reads the messages and what it gathers from them), and
R_A and R_B share their head; so T(R_B)[|T(R_A)| - |G|:] is the same whether both are
rendered with the conversation's tools or both without, and the splice renders them
without (`pipeline._splice`: each tool's JSON schema written twice a turn was most of a
splice's rendering). tests/test_splice.py holds the tail equal both ways.

The rules read the template input (the conversation after marking, the gateway and the
serving engine: dicts whose ``role`` is never marked). A role is "system" for the
templates when it is ``system`` or ``developer``; Jinja's ``message.role`` on a dict
without one is undefined, which equals no string (`_role` gives None).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from prefixscope.prompt.values import SYSTEM_ROLES

# (conversation of the new request, n = length of the predecessor's) -> ctx, or None
Context = Callable[[Sequence[Any], int], "list[int] | None"]


@dataclass(frozen=True, slots=True)
class SpliceRule:
    """How a bundled template's render of an appended conversation is spliced."""

    generation: str  # G: what the template writes last with add_generation_prompt=True
    context: Context  # the messages of A the new part depends on (None: render whole)


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else None


def _system(message: Any) -> bool:
    return _role(message) in SYSTEM_ROLES


def _first_is_system_alike(conv: Sequence[Any], ctx: list[int], n: int) -> bool:
    """R's first message is a system message exactly when C's is (every rule's ``start``:
    the templates test ``messages[0].role`` for the system turn)."""
    first = conv[ctx[0]] if ctx else (conv[n] if n < len(conv) else None)
    return first is None or _system(first) == _system(conv[0])


def _deepseek(conv: Sequence[Any], n: int) -> list[int] | None:
    """deepseek-v4.jinja: ``bos + tools + ns.system + Σ P(m) + G``, where ns.system joins the
    content of *every* system/developer message in order, and P(m) reads m alone (user:
    content; assistant: content and calls; tool: content; system and other roles: nothing).

    So T(C)[:-|G|] starts with T(A)[:-|G|] iff the head is the same: no new message is a
    system/developer one. ctx = [] (no message of A): R_A is empty and R_B the new
    messages, neither holding a system message and both rendered without tools
    (`pipeline._splice`), so both have the head ``bos`` (no tools, an empty ns.system):
    T(R_A) = bos + G and T(R_B) = bos + Σ P(new) + G, whose tail is Σ P(new) + G exactly
    -- the messages of A are read by P(new) nowhere. (A's system messages, the head of a
    proxy view's prompt with every tool's text, were rendered twice a turn for nothing.)"""
    if n == 0 or any(_system(m) for m in conv[n:]):
        return None
    return []


def _qwen25(conv: Sequence[Any], n: int) -> list[int] | None:
    """qwen2.5.jinja: ``head(messages[0] if it is a system message, tools) + Σ P_i + G``
    over ``messages[start:]``, start = 1 after a leading system message. P_i reads message
    i, and for a tool message ``loop.first`` / ``loop.previtem.role`` (opening
    ``<|im_start|>user``) and ``loop.last`` / ``loop.nextitem.role`` (closing
    ``<|im_end|>``).

    A's last message is the only one whose part can change when messages follow: a tool
    message followed by a tool message loses its ``<|im_end|>`` -- then render whole.
    ctx = [0 if start] + [n - 1 if it is in the loop]: R_B has the same head and gives
    C[n]'s part the same previous item (not loop.first: n - 1 precedes it); C[n-1]'s own
    part in R (loop.first there) is in both T(R_A) and T(R_B) and cancels (it is the same
    in both: followed by nothing, or by a non-tool message). R's first message must be a
    system message exactly when C's is, or R's head would differ."""
    if n == 0:
        return None
    start = 1 if _system(conv[0]) else 0
    if n < len(conv) and _role(conv[n - 1]) == "tool" and _role(conv[n]) == "tool":
        return None
    ctx = [0] if start else []
    if n - 1 >= start:
        ctx.append(n - 1)
    return ctx if _first_is_system_alike(conv, ctx, n) else None


def _truthy(message: Any, key: str) -> bool:
    return isinstance(message, dict) and bool(message.get(key))


def _qwen36(conv: Sequence[Any], n: int) -> list[int] | None:
    """qwen3.6.jinja: qwen2.5's structure (the same tool grouping, a head only when there
    are tools or a leading system message), plus one dependence on the whole conversation:
    an assistant message shows its reasoning only when ``index > ns.last_user`` (after the
    last user message).

    A new user message moves last_user past A's messages: any assistant of A after A's last
    user message with reasoning would lose it (the documented history rewrite) -- then
    render whole. Otherwise A's parts are unchanged. For a new message, index > last_user
    is the same in R as in C: with a new user message the last one is the same message in
    both (order kept); without one, every new message is after C's last user (it is in A)
    and after R's (R's messages before the new ones are ctx, all before it). ctx as for
    qwen2.5."""
    ctx = _qwen25(conv, n)
    if ctx is None or _hides_shown_reasoning(conv, n):
        return None
    return ctx


def _hides_shown_reasoning(conv: Sequence[Any], n: int) -> bool:
    """qwen3.6 shows an assistant message's reasoning only after the last user message:
    does a user message among ``conv[n:]`` hide reasoning that ``conv[:n]`` showed (an
    assistant message with truthy ``reasoning_content`` after its last user message)?"""
    if not any(_role(m) == "user" for m in conv[n:]):
        return False
    last_user = max((i for i in range(n) if _role(conv[i]) == "user"), default=-1)
    return any(_role(conv[i]) == "assistant" and _truthy(conv[i], "reasoning_content")
               for i in range(last_user + 1, n))


def _harmony(conv: Sequence[Any], n: int) -> list[int] | None:
    """o200k-harmony.jinja: ``developer head(messages[0] if system, tools) + Σ P_i + G``
    over ``messages[start:]``, with one state: ``ns.calls``, the [id, name] of every tool
    call with a truthy id so far, in order. A tool message's name is the last pair whose
    id equals its ``tool_call_id`` (else its own name, else ``tool``); nothing looks ahead.

    So A's parts never change. The new part depends on A only through the pairs whose id
    a new tool message asks for: ctx = every assistant of A in the loop with a call whose
    id is one of those (in order, so the last matching pair is the same one; pairs with
    other ids are never read for those messages). An id that is not hashable (a JSON list
    or object) cannot be looked up so: render whole.

    Not the head: R_A and R_B are rendered without tools (`pipeline._splice`), and when
    R's first message (ctx's first, else C[n]) is no system/developer one, neither has a
    head (start = 0, no tools: the developer message is not written), so T(R_A) =
    Σ P(R_A) + G and T(R_B) = Σ P(R_A) + Σ P(new) + G, with the new parts as in C (the
    head reads neither ``ns.calls`` nor anything a part reads): the tail is Σ P(new) + G.
    C's leading system message -- a Codex session's instructions, the longest message --
    is rendered by neither. Where R's first message is a system one (no call asked for,
    C[n] a system or developer message), ctx takes C's leading system message as before
    (0 if start), and R's head must then be one exactly when C's is."""
    if n == 0:
        return None
    start = 1 if _system(conv[0]) else 0
    wanted: set[Any] = set()
    for message in conv[n:]:
        if _role(message) == "tool" and "tool_call_id" in message:
            try:
                wanted.add(message["tool_call_id"])
            except TypeError:
                return None
    ctx = [i for i in range(start, n)
           if _role(conv[i]) == "assistant" and _asks(conv[i], wanted)] if wanted else []
    if ctx or n == len(conv) or not _system(conv[n]):
        return ctx
    ctx = [0] if start else []
    return ctx if _first_is_system_alike(conv, ctx, n) else None


def _asks(message: dict[str, Any], wanted: set[Any]) -> bool:
    """Does one of this assistant message's calls carry a truthy id in `wanted`? (The
    template reads ``call.id`` of dict calls only: on anything else it is undefined.)"""
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        if isinstance(call, dict) and call.get("id"):
            try:
                if call["id"] in wanted:
                    return True
            except TypeError:  # an unhashable id equals no hashable one
                continue
    return False


# Bundled template name -> its rule. A template is spliced only when its source is the
# bundled file's (`render._splice_rule`): the proofs above are about that text.
SPLICES: dict[str, SpliceRule] = {
    "deepseek-v4": SpliceRule("<｜Assistant｜>", _deepseek),
    "qwen2.5": SpliceRule("<|im_start|>assistant\n", _qwen25),
    "qwen3.6": SpliceRule("<|im_start|>assistant\n", _qwen36),
    "o200k-harmony": SpliceRule("<|start|>assistant", _harmony),
}


@dataclass(frozen=True, slots=True)
class HeadRule:
    """How a bundled template's render of a conversation is cut after its head (`HEADS`)."""

    generation: str  # G: what the template writes last with add_generation_prompt=True
    # (template input X, k) -> does T's render of X cut at message k: T(X) is
    # T(X[:k])[:-|G|] followed by a part Q(X[k:]) that X[k:] alone decides, then G?
    # `heads_split` asks it, after checking that X[k:] holds no system or developer
    # message (every rule's proof takes that as given).
    cuts: Callable[[Sequence[Any], int], bool]


# Bundled template name -> its `HeadRule`, for the templates whose render of a
# conversation H + M (H the head: messages and tools; M messages none of which is a system
# or developer one) is T(H)[:-|G|] followed by a part Q(M) that M alone decides, then G,
# wherever the rule's `cuts` holds at |H|: the head may change (a what-if's edit of the
# system prompt or the tools, a billing header's new hash) and the rest of the prompt stays
# (`pipeline.head_text`). Applied at two cuts, it also splits Q: with K = H + M,
# T(H + M + N) = T(K)[:-|G|] + Q(N) + G = T(H)[:-|G|] + Q(M) + Q(N) + G where `cuts` holds
# at |H| and |H| + |M| (`pipeline._splice_head`, which renders H' and H' + N alone).


def _cuts_always(conv: Sequence[Any], k: int) -> bool:
    """deepseek-v4.jinja: T(X) = bos + tools(any_system(X)) + ns.system(X) + sum of P(m)
    over X + G, where any_system and ns.system read the system/developer messages only,
    and P(m) reads m alone (system and unknown roles: nothing). With no such message in
    M = X[k:], any_system(X) = any_system(X[:k]) and ns.system(X) = ns.system(X[:k]), so
    T(X) = T(X[:k])[:-|G|] + sum of P(m) over M + G, at every k."""
    return True


def _tool(message: Any) -> bool:
    return _role(message) == "tool"


def _cuts_qwen25(conv: Sequence[Any], k: int) -> bool:
    """qwen2.5.jinja: T(X) = S(X) + sum of P_i over i >= s + G, where s = 1 when X[0] is a
    system/developer message (else 0), S(X) the system turn reads X[0] (when s = 1, else
    the default line) and the tools, and P_i reads X[i] and, for a tool message only,
    whether it is ``loop.first`` or ``loop.previtem`` (X[i-1]) is a tool message (its
    ``<|im_start|>user``) and whether it is ``loop.last`` or ``loop.nextitem`` (X[i+1]) is
    a tool message (its ``<|im_end|>``); the loop index is never read.

    Claim: with H = X[:k], M = X[k:] (no system/developer message) and not both X[k-1]
    and X[k] tool messages, T(X) = T(H)[:-|G|] + Q(M) + G, where Q(M) is the sum of the
    parts of M's messages with M[0]'s left neighbour taken as none (loop.first) and
    M[-1]'s right one as none (loop.last): M's alone. s and S: for k >= 1, X[0] = H[0];
    for k = 0, X[0] = M[0] is no system message, so s = 0 and S is the default line and
    the tools in both T(X) and T([]). H's parts: only H's last loop message reads past H,
    and only when it is a tool message -- then X[k] is not one, and it closes as
    loop.last does in T(H). M's parts: only M[0] reads before M, and only when it is a
    tool message -- then it opens the user turn in both, as loop.first (no loop message
    before it: k <= s) or after X[k-1], which is not a tool message. Where both are tool
    messages the two results share one user turn: not cut (render whole)."""
    return not (0 < k < len(conv) and _tool(conv[k - 1]) and _tool(conv[k]))


def _cuts_qwen36(conv: Sequence[Any], k: int) -> bool:
    """qwen3.6.jinja: qwen2.5's structure (the same tool grouping; S(X) reads X[0] when it
    is a system message and the tools, and is empty without either), plus one dependence
    on the whole conversation: an assistant message at index i (``loop.index0 + start``:
    its place in X) shows its reasoning when ``i > ns.last_user``, the index of X's last
    user message (-1: none).

    Claim: with qwen2.5's condition at k, and, when M = X[k:] holds a user message, no
    assistant message of H = X[:k] after H's last user message with a truthy
    ``reasoning_content``, T(X) = T(H)[:-|G|] + Q(M) + G, Q(M) M's alone. The tool
    grouping and S as for qwen2.5. Reasoning of M's assistant message at k + j: when M
    holds a user message, X's last one is M's, at k + u, and it shows iff j > u; when not,
    X's last user message is before k (in H, or none), and it shows: in both cases M
    alone decides. Of H's assistant messages: when M holds no user message, X's last user
    message is H's, as in T(H); when it holds one, none shows in T(X) (all before it),
    and in T(H) those after H's last user message show theirs, none of which is truthy
    by the condition: the same text."""
    return _cuts_qwen25(conv, k) and not _hides_shown_reasoning(conv, k)


def _cuts_harmony(conv: Sequence[Any], k: int) -> bool:
    """o200k-harmony.jinja: T(X) = D(X) + sum of P_i over i >= s + G, where s = 1 when
    X[0] is a system/developer message, D(X) the developer message reads X[0] (when s =
    1) and the tools (empty without either), and P_i reads X[i] and ``ns.calls``: the
    [id, name] of every call with a truthy id of the loop's assistant messages before i,
    in order; a tool message's name is the last pair whose id equals its
    ``tool_call_id`` (else its own name, else ``tool``). Nothing looks ahead.

    Claim: with H = X[:k], M = X[k:] (no system/developer message) and no call of an
    assistant message of H carrying an id that a tool message of M asks for,
    T(X) = T(H)[:-|G|] + Q(M) + G, where Q(M) is the sum of M's parts with the pairs of
    M's own assistant messages alone: M's. s and D as for qwen2.5 (k = 0: X[0] = M[0]
    is no system message). H's parts read nothing after them. A tool message of M looks
    for the pairs with its id, and among the pairs before it in X those are M's own (H
    has none with that id): the same last one, or none in both. An id that is not
    hashable (a JSON list or object) cannot be looked up so: not cut."""
    wanted: set[Any] = set()
    for message in conv[k:]:
        if _role(message) == "tool" and "tool_call_id" in message:
            try:
                wanted.add(message["tool_call_id"])
            except TypeError:
                return False
    return not wanted or not any(_role(conv[i]) == "assistant" and _asks(conv[i], wanted)
                                 for i in range(k))


# The frame. Every template of `HEADS`, given a head input X = [m_1, ..., m_k] of system
# and developer messages alone (contents c_j, strings: `serving` joins a message's text
# into one) and the tools, prints each c_j once, as it is, and reads it nowhere else: its
# render is F_0 + c_1 + F_1 + ... + c_k + F_k, the F_j read the roles, k and the tools
# alone (`pipeline._framed_head` renders the F_j once for heads whose contents differ).
# From the sources (no filter, test or method is applied to a content; Jinja prints a
# string as it is, the environment neither escapes nor finalizes):
# * deepseek-v4: the first loop sets ``ns.system`` to c_1 and appends '\n\n' + c_j for
#   each later one (``+``: concatenation) and ``ns.any_system`` (a role test); ns.system
#   is printed once; the second loop's branches are for user, assistant and tool
#   messages, none in X.
# * qwen2.5: ``system_text`` is c_1 (X[0] is a system or developer message), printed
#   once; the loop over X[1:] takes the last branch for a system or developer message
#   (``'<|im_start|>' + message.role + '\n'``, c_j, ``'<|im_end|>\n'``).
# * qwen3.6: the ``last_user`` loop reads roles; c_1 is printed in exactly one of the
#   two branches (tools, or no tools and a system X[0]); the loop over X[1:] as qwen2.5
#   (``index > ns.last_user`` is read for assistant messages only).
# * o200k-harmony: ``start`` reads X[0]'s role; c_1 is printed once after '# Instructions';
#   the loop over X[1:] takes the last branch (role, c_j); ``ns.calls`` reads assistant
#   messages' calls only.
HEADS: dict[str, HeadRule] = {
    "deepseek-v4": HeadRule("<｜Assistant｜>", _cuts_always),
    "qwen2.5": HeadRule("<|im_start|>assistant\n", _cuts_qwen25),
    "qwen3.6": HeadRule("<|im_start|>assistant\n", _cuts_qwen36),
    "o200k-harmony": HeadRule("<|start|>assistant", _cuts_harmony),
}


def heads_split(name: str, conversation: Sequence[Any], head: int) -> bool:
    """Is `HEADS`' precondition met for template `name` by a template input whose first
    `head` messages are its head: none of the messages after them a system or developer
    one, and the template's render cut there (`HeadRule.cuts`)?"""
    rule = HEADS.get(name)
    return rule is not None and not any(_system(m) for m in conversation[head:]) and \
        rule.cuts(conversation, head)
