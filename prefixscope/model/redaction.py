"""Secret masking for everything prefixscope prints or writes: one list of patterns.

Logs hold credentials (API keys pasted into prompts, ``Authorization`` headers in
captures, private keys in tool output). The store keeps the logs as logged; every
output -- terminal, ``--json``, report files, ``sql`` rows -- goes through one
`Redactor`, chosen once per run by the command line (``--redact REGEX``,
``--no-default-redaction``, ``PREFIXSCOPE_REDACT``) and read here by `active()`.

Masking is length-preserving: each masked character becomes ``•`` (newlines stay), so
a masked text keeps every character offset -- segment spans, divergence offsets and
token spans computed on the original text still index the masked one, and a view may
cut a masked text anywhere without showing part of a secret. A built-in rule keeps a
short non-secret prefix naming the kind of secret (``sk-ant-•••``, ``Authorization:
Bearer •••``).

The built-in patterns follow gitleaks' rules (config/gitleaks.toml, gitleaks/gitleaks at
b58d3f1: anthropic-api-key, openai-api-key, gcp-api-key, github-pat / -oauth /
-app-token / -fine-grained-pat, slack-*-token, slack-webhook-url, aws-access-token,
stripe-access-token, huggingface-access-token / -organization-api-token, gitlab-pat /
-pat-routable, private-key, jwt, npm-access-token, pypi-upload-token,
sendgrid-api-token, vault-service-token / -batch-token, databricks-api-token,
twilio-api-key (and the account SID ``AC`` beside it), digitalocean-pat / -access-token
/ -refresh-token, telegram-bot-api-token without its keyword; an Azure storage
``AccountKey=`` is the connection string's 88-character base64 key). The password and
AWS-secret pairs take the shape of its generic-api-key rule (a key name, ``=`` or ``:``,
a value) and a password in a URL that of its sidekiq-sensitive-url
(``scheme://user:password@host``), for any host. Lengths are loosened where a gateway's
keys are shorter than the vendor's (new-api and LiteLLM issue ``sk-`` keys of their
own). Every rule is anchored on a vendor prefix, a header or key name, or a URL's
``user:password@``, so hex request ids, content hashes and nonces such as Claude Code's
``cch=`` are never masked. A vendor prefix counts after ``_`` too (gitleaks' ``\b`` does
not see the token in ``log_ghp_…``, a file name).

Every pattern runs in time linear in the text, since a log may be written to hang it
(``"sk-" * 20000`` took 7 s when a look-ahead scanned to the end of the run from each
``sk-`` in it): a repetition that can scan far is possessive (``*+``) and taken whole; a
look-ahead that scans a run is made only where the run starts, or reads at most 256
characters (a header's or password's digit or symbol: no credential is 256 letters); a
key's digit is looked for in its run taken whole, which, without one, is the group
``skip`` and left as it is (a later ``sk-`` in the same run has no digit either).
tests/test_linear_time.py holds each pattern to a size doubling check on adversarial
texts and to the old patterns' masks.
"""

from __future__ import annotations

import dataclasses
import re
from bisect import bisect_right
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from itertools import accumulate
from typing import Any

MASK = "•"
# `Redactor.window` masks this much text either side of the part it shows: a secret is
# found in a window when it lies within this distance of it (an RSA-8192 PEM key is
# ~6.5 kB, a JWT a few kB). Masking a 600 kB prompt whole to show 200 characters of it
# made masking 70% of `diff --all`.
WINDOW_MARGIN = 16 * 1024


@dataclass(frozen=True, slots=True)
class Rule:
    """One pattern; a named group ``keep`` at its start is shown, the rest is masked.

    `anchors` and `folded` are literals of which every match of `pattern` contains at
    least one (`folded` compared case-insensitively, as the pattern's ``(?i)`` does): a
    text holding none of them cannot match, and the pattern is not run over it. A rule
    with neither (a user's ``--redact``) always runs. tests/test_redaction.py checks that
    each built-in rule's anchors hold for matches Hypothesis draws from its pattern.

    `lead`, when set: every match starts at most `lead` characters before one of those
    anchors it holds (``sk-`` starts its match: 0; ``://`` is 2 to 21 characters into
    ``\\b[A-Za-z][A-Za-z0-9+.-]{1,20}://``: 21). The pattern is then tried only there
    (`_sub_near`), not at every character of a text that holds an anchor somewhere
    (most of their patterns start with a look-behind or ``\\b``, so the engine has no
    literal to skip ahead by). tests/test_redaction.py checks each lead on every start
    of a match of texts Hypothesis draws from the pattern."""

    name: str
    pattern: re.Pattern[str]
    builtin: bool = True
    anchors: tuple[str, ...] = ()
    folded: tuple[str, ...] = ()
    _folded_re: re.Pattern[str] | None = None
    lead: int | None = None

    def may_match(self, text: str, lowered: str | None) -> bool:
        """False only when `text` holds none of the anchors (`lowered`: `lowered(text)`)."""
        return self.may_hold(text, lowered, text)

    def may_hold(self, plain: Container[str], folded: Container[str] | None,
                 text: str) -> bool:
        """False only when `text` holds none of the anchors: `plain` holds those in it (the
        text itself, or the anchors found in it), `folded` the folded anchors in its
        lowered form (None: not known, the regular expression engine asked of `text`)."""
        if not self.anchors and not self.folded:
            return True
        if any(a in plain for a in self.anchors):
            return True
        if not self.folded:
            return False
        if folded is not None:  # a letter of an anchor matches its two cases alone
            return any(a in folded for a in self.folded)
        # IGNORECASE also pairs "K" (Kelvin) with "k", "ſ" with "s", ...: ask the regular
        # expression engine the pattern runs on.
        assert self._folded_re is not None
        return self._folded_re.search(text) is not None


# The characters IGNORECASE pairs with an ASCII letter (the `re` docs: İ ı ſ K); no other
# character is case-insensitively equal to an ASCII letter, and only İ lowers to two.
_FOLDS_TO_ASCII = "\u0130\u0131\u017f\u212a"


def lowered(text: str) -> str | None:
    """``text.lower()`` where it holds an ASCII anchor (letters, digits, ``-_.``) exactly
    where IGNORECASE finds that anchor in `text`: a text none of whose characters
    `_FOLDS_TO_ASCII` names (lowering keeps every position; an ASCII letter is lowered
    and any other character stays outside ASCII); else None."""
    if text.isascii() or not any(c in text for c in _FOLDS_TO_ASCII):
        return text.lower()
    return None


def _rule(name: str, regex: str, anchors: tuple[str, ...] = (),
          folded: tuple[str, ...] = (), lead: int | None = 0) -> Rule:
    folded_re = re.compile("|".join(map(re.escape, folded)), re.IGNORECASE) if folded else None
    return Rule(name, re.compile(regex), anchors=anchors, folded=folded, _folded_re=folded_re,
                lead=lead)


# Header values: the scheme word stays visible (what kind of credential), the value goes.
# (at least one digit or symbol: "Authorization: required" is prose, not a credential).
# The digit or symbol within the value's first 256 characters: a look-ahead from each
# header name in a run of them would otherwise scan the rest of the run (linear time; a
# credential is never 256 letters).
_HEADER_VALUE = r"""(?=[^\s"',;\\•0-9+/=_.~-]{0,255}+[0-9+/=_.~-])[^\s"',;\\•]{8,}+"""
# A vendor prefix starts a token when no letter or digit is before it (``\b`` would not
# see one after ``_``, as in a file name ``log_ghp_…``).
_START = r"(?<![A-Za-z0-9])"
_END = r"(?![A-Za-z0-9])"
_AWS_KEY_ID = r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}"
# A secret access key: 40 characters of base64's alphabet, standing alone.
_AWS_SECRET = r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"
_PASSWORD_KEY = r"(?<![A-Za-z0-9])(?i:password|passwd)"
# A password's value: after "=" or in quotes, any; after a bare ":", one with a digit or
# a symbol ("password: required" is prose).
_PASSWORD_VALUE = r"""[^\s"'`,;&\\•]{3,}+"""
# After a bare ":": a digit or symbol within the first 256 characters (as `_HEADER_VALUE`).
_PASSWORD_PROSE = (r"""(?=[^\s"',;\\•0-9+/=_.~!#$%^*-]{0,255}+[0-9+/=_.~!#$%^*-])"""
                   + _PASSWORD_VALUE)
SECRET_PATTERNS: tuple[Rule, ...] = (
    _rule("private-key",  # gitleaks private-key; the END line stays; unterminated: the body
          r"(?P<keep>-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----)"
          r"(?:(?:(?!-----(?:BEGIN|END)[ A-Z0-9_-]{0,100}PRIVATE KEY)[\s\S]){64,}+"
          r"(?=-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----)"
          r"|(?:[A-Za-z0-9+/=\s]|\\[nr])++)", ("-----BEGIN",)),
    _rule("anthropic-api-key", rf"(?P<keep>{_START}sk-ant-)[a-z]++\d\d-[A-Za-z0-9_-]{{20,}}+",
          ("sk-ant-",)),
    _rule("openai-api-key",  # and the sk- keys of new-api, one-api, LiteLLM
          rf"(?P<keep>{_START}sk-(?:proj-|svcacct-|admin-)?)"
          r"(?!ant-)(?=[A-Za-z0-9_-]{20})"
          r"(?:[A-Za-z_-]*+\d[A-Za-z0-9_-]*+|(?P<skip>[A-Za-z_-]++))", ("sk-",)),
    _rule("stripe-access-token", rf"(?P<keep>{_START}(?:sk|rk)_(?:test|live|prod)_)"
                                 rf"[A-Za-z0-9]{{10,99}}{_END}",
          tuple(f"{k}_{env}_" for k in ("sk", "rk") for env in ("test", "live", "prod"))),
    _rule("google-api-key", rf"(?P<keep>{_START}AIza)[0-9A-Za-z_-]{{35}}", ("AIza",)),
    _rule("github-token", rf"(?P<keep>{_START}(?:ghp|gho|ghu|ghs|ghr)_)[0-9A-Za-z]{{36}}"
                          rf"|(?P<keep2>{_START}github_pat_)\w{{82}}",
          ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
    _rule("gitlab-pat", rf"(?P<keep>{_START}glpat-)[\w-]{{20,300}}(?:\.[0-9a-z]{{9}})?",
          ("glpat-",)),
    _rule("huggingface-access-token",  # and -organization-api-token
          rf"(?P<keep>{_START}(?:hf_|api_org_))[A-Za-z]{{34}}{_END}", ("hf_", "api_org_")),
    _rule("slack-webhook-url", r"(?P<keep>(?:https?://)?hooks\.slack\.com/"
                               r"(?:services|workflows|triggers)/)[A-Za-z0-9+/]{43,200}",
          ("hooks.slack.com/",), lead=len("https://")),
    _rule("slack-token", rf"(?P<keep>{_START}xox[abposer]-)[0-9A-Za-z-]{{10,}}+"
                         rf"|(?P<keep2>{_START}xapp-)\d-[A-Za-z0-9-]{{10,}}+", ("xox", "xapp-")),
    _rule("npm-access-token", rf"(?P<keep>{_START}npm_)[A-Za-z0-9]{{36}}{_END}", ("npm_",)),
    _rule("pypi-upload-token", rf"(?P<keep>{_START}pypi-)AgEIcHlwaS5vcmc[\w-]{{50,1000}}+",
          ("pypi-AgEIcHlwaS5vcmc",)),
    _rule("sendgrid-api-token", rf"(?P<keep>{_START}SG\.)[A-Za-z0-9=_.-]{{66}}"
                                r"(?![A-Za-z0-9=_-])", ("SG.",)),
    # an Azure storage connection string's key: 64 bytes in base64
    _rule("azure-storage-account-key", r"(?P<keep>(?<![A-Za-z0-9])(?i:accountkey)\s*=\s*)"
                                       r"[A-Za-z0-9+/]{86}==", folded=("accountkey",)),
    _rule("vault-token", rf"(?P<keep>{_START}hvs\.)[\w-]{{90,120}}+(?![\w-])"
                         rf"|(?P<keep2>{_START}hvb\.)[\w-]{{138,300}}+(?![\w-])",
          ("hvs.", "hvb.")),
    _rule("databricks-api-token", rf"(?P<keep>{_START}dapi)[a-f0-9]{{32}}(?:-\d)?{_END}",
          ("dapi",)),
    _rule("twilio-api-key", rf"(?P<keep>{_START}(?:SK|AC))[0-9a-fA-F]{{32}}{_END}",
          ("SK", "AC")),
    _rule("digitalocean-token", rf"(?P<keep>{_START}do[opr]_v1_)[a-f0-9]{{64}}{_END}",
          ("_v1_",), lead=len("dop")),
    # the bot's id and ":" stay; the 35 characters from "A" are the secret
    _rule("telegram-bot-api-token", r"(?P<keep>(?<![0-9])[0-9]{5,16}:)A[A-Za-z0-9_-]{34}"
                                    r"(?![A-Za-z0-9_-])", (":A",), lead=16),
    # Before the access key id: the id, and what is between, stay as the id's rule leaves
    # them; the 40 characters after it (within 200) are the secret the id comes with.
    _rule("aws-secret-access-key",
          rf"(?P<keep>{_START}{_AWS_KEY_ID}{_END}[\s\S]{{1,200}}?){_AWS_SECRET}"
          r"|(?i:(?P<keep2>\baws_?secret_?(?:access_?)?key[\"']?\s*[:=]\s*[\"']?))"
          + _AWS_SECRET, ("A3T", "AKIA", "ASIA", "ABIA", "ACCA"),
          ("awssecret", "aws_secret")),
    _rule("aws-access-key-id", rf"(?P<keep>{_START}(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA))"
                               rf"[A-Z2-7]{{16}}{_END}",
          ("A3T", "AKIA", "ASIA", "ABIA", "ACCA")),
    _rule("jwt", rf"(?P<keep>{_START}ey)[A-Za-z0-9]{{17,}}+\.ey[A-Za-z0-9/\\_-]{{17,}}+\."
                 r"(?:[A-Za-z0-9/\\_-]{10,}+={0,2})?", (".ey",),
          lead=None),  # ".ey" ends a run of any length: tried over the text
    # user:password@host: the password goes, the scheme, user and host stay.
    _rule("url-password", r"(?P<keep>\b[A-Za-z][A-Za-z0-9+.-]{1,20}://[^\s:/@\"'<>]{1,100}:)"
                          r"[^\s/@\"'<>•]{1,200}(?=@[A-Za-z0-9\[])", ("://",), lead=21),
    _rule("password-assignment",
          rf"(?P<keep>{_PASSWORD_KEY}(?:[\"']?\s*=\s*[\"']?|[\"']?\s*:\s*[\"']))"
          + _PASSWORD_VALUE
          + rf"|(?P<keep2>{_PASSWORD_KEY}\s*:\s*)" + _PASSWORD_PROSE, folded=("passw",)),
    # After the keyed rules, so "Bearer sk-ant-•••" keeps the kind of key it held.
    _rule("authorization-header",
          r"(?i)(?P<keep>\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?"
          r"(?:(?:bearer|basic|token|digest|apikey)\s+)?)" + _HEADER_VALUE,
          folded=("authorization",), lead=len("proxy-")),
    _rule("api-key-header",
          r"(?i)(?P<keep>\b(?:x-api-key|api-key|x-goog-api-key|x-auth-token)[\"']?\s*[:=]\s*"
          r"[\"']?)" + _HEADER_VALUE, folded=("api-key", "x-auth-token"),
          lead=len("x-goog-")),
    _rule("bearer-token", r"(?P<keep>\b[Bb]earer\s+)[A-Za-z0-9._~+/-]{20,}+=*",
          ("earer",), lead=1),
)

# Request headers that carry credentials: never kept in a store (ingest), and their
# values masked wherever a mapping of headers is printed.
CREDENTIAL_HEADER = re.compile(
    r"(^|[-_])(authorization|cookie|api-key|apikey|access-key|secret-key|private-key|"
    r"subscription-key|vk|token|secret|password|auth|signature|credentials?)([-_]|$)")
# The subset a JSON output's keys are checked against: exact header names, so that the
# shapes' own keys (``token_a``, ``tokens``) are never taken for one.
_CREDENTIAL_KEY = re.compile(
    r"(?i)(?:proxy-)?authorization|(?:x-)?api-key|x-goog-api-key|x-auth-token|"
    r"(?:set-)?cookie|password|passwd")

# Short previews (segments) mask more than secrets: any long opaque token (keys, base64;
# letters and digits mixed), hex runs with a digit (nonces, hashes) and e-mail addresses.
# A token and an address are looked for only where their run of characters starts (the
# look-behinds), so each run is scanned a fixed number of times: linear time. A token
# starting inside a run could only be shorter, with fewer digits and letters, so none is
# lost; an address keeps the run's leading ``.+-`` (``lead``), where ``\b`` began it.
OPAQUE = re.compile(
    r"(?<![A-Za-z0-9+/_=-])(?=[A-Za-z0-9+/_=-]{24})(?=[A-Za-z+/_=-]*+\d)"
    r"(?=[0-9+/_=-]*+[A-Za-z])[A-Za-z0-9+/_=-]++"
    r"|\b(?=[a-fA-F]*+\d)[0-9a-fA-F]{5,}+\b"
    r"|(?<![\w.+-])(?P<lead>[.+-]*+)\b[\w.+-]*+@[\w-]++\.[\w.]+\b")

# rich's styling in a captured terminal rendering (SGR and other CSI sequences, OSC 8
# hyperlinks); log text itself reaches the terminal with its control characters shown
# as \xNN, so every ESC in a rendering is rich's own.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


class RedactionError(ValueError):
    """A --redact pattern that is not a valid regular expression."""


def _masked(match: re.Match[str]) -> str:
    text = match.group()
    groups = match.re.groupindex
    if "skip" in groups and match.group("skip") is not None:
        return text  # a run taken whole that is not a secret (no digit or symbol)
    keep = next((len(match.group(g) or "") for g in ("keep", "keep2") if g in groups
                 and match.group(g)), 0)
    return text[:keep] + re.sub(r"[^\r\n]", MASK, text[keep:])


@dataclass(frozen=True, slots=True)
class Redactor:
    """The masking rules of one run: built-in secret patterns and the user's own."""

    rules: tuple[Rule, ...] = SECRET_PATTERNS

    @property
    def defaults(self) -> bool:
        """Whether the built-in masking is on (``--no-default-redaction`` turns it off,
        the secret patterns and a preview's masking of opaque tokens alike)."""
        return any(rule.builtin for rule in self.rules)

    def text(self, s: str) -> str:
        """`s` with every match of every rule masked (same length, newlines kept)."""
        if not self.rules or not s:
            return s
        # `s` itself where nothing is masked, not an equal string the caches hold: a
        # value walked (`value`) then comes back as it was, not as a copy
        if len(s) > _SHORT:
            whole = _text(self.rules, s)
            return s if whole == s else whole
        known = _short_texts(self.rules)
        masked = known.get(s)
        if masked is None:
            if len(known) >= _SHORT_KEPT:
                known.clear()
            found = _text.__wrapped__(self.rules, s)
            masked = known[s] = _UNCHANGED if found == s else found
        return masked or s

    def window(self, s: str, start: int, end: int) -> str:
        """``text(s)[start:end]``, masking only `WINDOW_MARGIN` characters either side of
        the window: equal to it for any secret shorter than the margin."""
        start, end = max(0, start), min(len(s), end)
        if start >= end:
            return ""
        lo, hi = max(0, start - WINDOW_MARGIN), min(len(s), end + WINDOW_MARGIN)
        if lo == 0 and hi == len(s):
            return self.text(s)[start:end]
        return self.text(s[lo:hi])[start - lo:end - lo]

    def value(self, obj: Any) -> Any:
        """`obj` with every string in it masked: dicts, lists, tuples and dataclasses are
        walked; other values are returned as they are.

        Mapping keys are masked by the built-in patterns only: a JSON shape's keys are its
        field names, which a user's regex written for log text could hit (``--redact
        session`` must not rename ``session``), while a secret used as a key (a skip
        reason, a dimension value) still matches a built-in pattern. The value under a
        credential header name (``authorization``, ``x-api-key``, ``cookie``) is masked
        whole."""
        if not self.rules:
            return obj
        return self._walk(obj, _short_texts(self.rules), _builtin_only(self.rules), {})

    def styled(self, rendering: str) -> str:
        """A terminal rendering masked as if it had no styling: a secret split by rich's
        escape sequences (a highlighted divergence inside a key) is still found."""
        if not self.rules or "\x1b" not in rendering:
            return self.text(rendering)
        pieces = _ANSI.split(rendering)
        codes = _ANSI.findall(rendering)
        masked = self.text("".join(pieces))
        out: list[str] = []
        at = 0
        for i, piece in enumerate(pieces):
            out.append(masked[at:at + len(piece)])
            at += len(piece)
            if i < len(codes):
                out.append(codes[i])
        return "".join(out)

    def _walk(self, obj: Any, known: dict[str, str], keys: Redactor,
              walked: dict[int, tuple[Any, Any]]) -> Any:
        """`value(obj)`; `known`: the short texts masked already (`_short_texts`), `keys`:
        the redactor of mapping keys (`_builtin_only`), looked up once a value; `walked`:
        each dataclass met so far in this `value` call, by id, with what it came back as."""
        kind = type(obj)
        if kind in _PLAIN:  # most of a report: counts, rates, flags
            return obj
        if kind is str:
            masked = known.get(obj)  # (`text`'s own cache of short texts, read here)
            if masked is not None:
                return masked or obj
        if isinstance(obj, str):
            return self.text(obj)
        # Containers and dataclasses come back as they were when nothing in them is
        # masked: a report of 100k usage records is walked, not copied. Their plain
        # values are taken as they are, without a call each.
        if kind is dict or isinstance(obj, Mapping):
            items = [(keys.text(k) if isinstance(k, str) else k,
                      v if type(v) in _PLAIN else
                      _whole(v) if isinstance(k, str) and isinstance(v, str)
                      and _CREDENTIAL_KEY.fullmatch(k) else self._walk(v, known, keys, walked))
                     for k, v in obj.items()]
            if all(k is a and v is b for (k, v), (a, b) in zip(items, obj.items(),
                                                                strict=True)):
                return obj
            return dict(items)
        if isinstance(obj, list | tuple) and kind in (list, tuple):
            items = [v if type(v) in _PLAIN else self._walk(v, known, keys, walked) for v in obj]
            if all(a is b for a, b in zip(items, obj, strict=True)):
                return obj
            return items if kind is list else tuple(items)
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            # A value a result holds in two places is walked once: a report's ledger is
            # its evidence's too, a one-domain replay its summary (a third of the report's
            # values). The ids are those of `value`'s argument's parts, alive throughout.
            seen = walked.get(id(obj))
            if seen is not None and seen[0] is obj:
                return seen[1]
            changed = {}
            for name in _init_fields(type(obj)):
                old = getattr(obj, name)
                field = type(old)
                if field in _PLAIN:
                    continue
                new = known.get(old) if field is str else None  # (as above)
                new = (new or old) if new is not None else self._walk(old, known, keys,
                                                                      walked)
                if new is not old:
                    changed[name] = new
            out = dataclasses.replace(obj, **changed) if changed else obj
            walked[id(obj)] = (obj, out)
            return out
        return obj


_PLAIN = frozenset({int, float, bool, type(None)})  # nothing to mask in them
# a short text masking left as it was, in `Redactor.text`'s cache (a masked text is as
# long as its text, never empty)
_UNCHANGED = ""


@cache
def _init_fields(kind: type) -> tuple[str, ...]:
    """The fields a dataclass's __init__ takes (what `dataclasses.replace` may set)."""
    return tuple(f.name for f in dataclasses.fields(kind) if f.init)


def _whole(value: str) -> str:
    """A credential header's value: its scheme word kept, the rest masked."""
    scheme, sep, _ = value.partition(" ")
    keep = len(scheme) + 1 if sep and scheme.lower() in ("bearer", "basic", "token",
                                                          "digest") else 0
    return value[:keep] + re.sub(r"[^\r\n]", MASK, value[keep:])


# A report masks tens of thousands of short strings, most of them many times over (field
# names, segment paths, causes, ids): each distinct one is masked once per set of rules.
_SHORT = 256
_SHORT_KEPT = 100_000
# id of a rules tuple -> (that tuple, held so the id is not reused; its short strings
# masked, or its built-in rules' redactor)
_SHORT_TEXTS: dict[int, tuple[tuple[Rule, ...], dict[str, str]]] = {}
_BUILTIN_ONLY: dict[int, tuple[tuple[Rule, ...], Redactor]] = {}


def _short_texts(rules: tuple[Rule, ...]) -> dict[str, str]:
    held = _SHORT_TEXTS.get(id(rules))
    if held is None or held[0] is not rules:
        held = _SHORT_TEXTS[id(rules)] = (rules, {})
    return held[1]


def _builtin_only(rules: tuple[Rule, ...]) -> Redactor:
    """The redactor of the built-in rules among `rules` (what mapping keys are masked by),
    one per set of rules."""
    held = _BUILTIN_ONLY.get(id(rules))
    if held is None or held[0] is not rules:
        held = _BUILTIN_ONLY[id(rules)] = (rules, Redactor(tuple(r for r in rules
                                                                  if r.builtin)))
    return held[1]


@lru_cache(maxsize=16)
def _text(rules: tuple[Rule, ...], s: str) -> str:
    # Cached: a diff masks each prompt once though it is both sides of two pairs.
    if len(s) > _NEAR_MIN:
        return _text_near(rules, s)
    if _anchors(rules).none_in(s):
        return s  # (most of a report's strings: ids, names, numbers as text)
    folded = lowered(s)
    for rule in rules:
        if rule.may_match(s, folded):
            s = rule.pattern.sub(_masked, s)
    return s


# A rule is tried at its anchors' places (`_starts`) in a text longer than `_NEAR_MIN`
# (below it, looking for an anchor and running the pattern costs less than listing the
# places: the short strings of a report), while the places are at most `_NEAR_MAX`, or one
# in `_NEAR_SHARE` characters of the text: past it one pass of the engine over the text
# costs less than a call per place.
_NEAR_MIN = 4096
_NEAR_MAX = 64
_NEAR_SHARE = 8


def _text_near(rules: tuple[Rule, ...], s: str) -> str:
    """`_text` of a text longer than `_NEAR_MIN`: a rule with a `lead` is tried only near
    its anchors' places (`_starts`, `_sub_near`); another runs over the text where the
    text holds one of its anchors.

    Each rule's step is ``rule.pattern.sub(_masked, s)`` of the text the rules before it
    left. The places are those of the text before any rule masked it: masking only turns
    characters into MASK, which no anchor holds, and keeps every position, so it never
    makes an anchor appear or move: where an anchor is in the text masked so far, it was
    in `s`. The places may hold more (an anchor a rule before masked): a superset, which
    `_sub_near` allows, and a rule run because its anchor was in `s` finds nothing where
    no anchor is left (every match holds one)."""
    places = _anchor_places(_anchors(rules), s)
    limit = max(_NEAR_MAX, len(s) // _NEAR_SHARE)
    for rule in rules:
        starts = _starts(rule, places, limit)
        if starts is not None:
            s = _sub_near(rule.pattern, s, starts)
        elif rule.may_hold(*places, s):
            s = rule.pattern.sub(_masked, s)
    return s


# Where the anchors are in a text: each anchor found (`Rule.anchors`) -> its places in the
# text, ascending; each folded anchor found (`Rule.folded`) -> its places in
# `lowered(text)`, or None where `lowered` gives no text.
_Places = tuple[dict[str, list[int]], dict[str, list[int]] | None]
_NOTHING: _Places = ({}, {})  # a text without any anchor (shared: never changed)


def _starts(rule: Rule, places: _Places, limit: int) -> list[int] | None:
    """Every place where a match of `rule` can start, ascending (maybe more than once):
    `rule.lead` characters before each place of its anchors, up to it; or None where the
    rule is to be run over the text (no `lead`; a folded anchor where `lowered` gives no
    text; more places than `limit`)."""
    plain, folded = places
    if rule.lead is None or (rule.folded and folded is None):
        return None
    at: list[int] = []
    for anchors, found in ((rule.anchors, plain), (rule.folded, folded or {})):
        for anchor in anchors:
            here = found.get(anchor, ())
            if len(here) > limit:
                return None
            at += here
    if rule.lead:
        at = [max(0, p - back) for p in at for back in range(rule.lead + 1)]
    return sorted(at) if len(at) <= limit else None


class _Anchors:
    """The anchors of one set of rules, and the places of them in each line of the long
    texts masked lately (a cache: `_anchor_places`)."""

    __slots__ = ("plain", "folded", "lines", "held", "_any")

    def __init__(self, rules: tuple[Rule, ...]) -> None:
        self.plain = tuple(dict.fromkeys(a for rule in rules for a in rule.anchors))
        self.folded = tuple(dict.fromkeys(a for rule in rules for a in rule.folded))
        self.lines: dict[str, _Places] = {}
        self.held = 0  # what the lines held cost: their characters and `_LINE_COST` each
        # any anchor, and any folded one as IGNORECASE finds it; None: a rule with
        # neither, which runs on every text
        self._any = None if not all(rule.anchors or rule.folded for rule in rules) else (
            re.compile("|".join(map(re.escape, self.plain))) if self.plain else None,
            re.compile("|".join(map(re.escape, self.folded)), re.IGNORECASE)
            if self.folded else None)

    def none_in(self, text: str) -> bool:
        """True only when no rule may match `text`: `Rule.may_hold` is false for each.

        Why equal: a rule may match where it has no anchor at all (then this is False),
        where one of its anchors is in `text`, or where one of its folded anchors is, as
        IGNORECASE finds it -- `may_hold` asks `lowered(text)` where that gives the places
        IGNORECASE finds (`lowered`), else the engine. Each search here looks for every
        rule's anchors at once (an alternation finds a match wherever one of its
        alternatives is), one call instead of one check per rule."""
        if self._any is None:
            return False
        plain, folded = self._any
        return (plain is None or plain.search(text) is None) and (
            folded is None or folded.search(text) is None)

    def scan(self, lines: list[str]) -> list[_Places]:
        """Where each anchor is in each of `lines` (none holding a newline), found by
        looking through them joined by newlines: one call per anchor, not per line and
        anchor. No anchor holds a newline, so each place in the joined text is in one line;
        a line `lowered` gives no text of is newlines in the lowered text (holding no
        folded anchor; its places are None)."""
        lows = [lowered(line) for line in lines]
        starts = list(accumulate([len(line) + 1 for line in lines], initial=0))
        # line -> anchor -> places, for the lines holding any
        plain: dict[int, dict[str, list[int]]] = {}
        folded: dict[int, dict[str, list[int]]] = {}
        for anchors, text, out in (
                (self.plain, "\n".join(lines), plain),
                (self.folded, "\n".join(low if low is not None else "\n" * len(line)
                                        for line, low in zip(lines, lows, strict=True)),
                 folded)):
            for anchor in anchors:
                for at in _every(text, anchor):
                    i = bisect_right(starts, at) - 1
                    out.setdefault(i, {}).setdefault(anchor, []).append(at - starts[i])
        return [_NOTHING if i not in plain and i not in folded and low is not None
                else (plain.get(i, {}), None if low is None else folded.get(i, {}))
                for i, low in enumerate(lows)]

    def keep(self, line: str, found: _Places) -> None:
        """Hold `found`, the places in `line`, for the next text holding the same line."""
        cost = len(line) + _LINE_COST
        if self.held + cost > _LINES_HELD:
            self.lines.clear()
            self.held = 0
        self.lines[line] = found
        self.held += cost


# Consecutive turns of a session repeat most of their text, so the windows a diff masks
# in them (`Redactor.window`) repeat most of their lines: each line is scanned once while
# held. What the lines held cost is bounded by `_LINES_HELD`: a line's characters and
# `_LINE_COST` for its entry (its string's header and its slot).
_LINES_HELD = 1 << 21
_LINE_COST = 64
# A text whose lines are shorter than this on average is scanned whole.
_SHORT_LINES = 16
# id of a rules tuple -> (that tuple, held so the id is not reused; its anchors)
_ANCHORS: dict[int, tuple[tuple[Rule, ...], _Anchors]] = {}


def _anchors(rules: tuple[Rule, ...]) -> _Anchors:
    held = _ANCHORS.get(id(rules))
    if held is None or held[0] is not rules:
        held = _ANCHORS[id(rules)] = (rules, _Anchors(rules))
    return held[1]


def _anchor_places(anchors: _Anchors, s: str) -> _Places:
    """Where each anchor is in `s`, read off the places in its lines (held, or scanned
    and held).

    Why equal: no anchor holds a newline (tests/test_redaction.py checks every built-in
    one), so each place of an anchor in `s` lies inside one of its lines and is that
    line's start plus the anchor's place in the line, and every place in a line is one in
    `s`. The same holds of the folded anchors in `lowered(s)`: `lowered` gives no text of
    `s` exactly where it gives none of one of its lines (the characters it refuses are in
    a line, never a newline), and otherwise lowers each character of `s` to one character
    (`lowered`'s docstring), an ASCII one as `str.lower` lowers it alone, so a folded
    anchor (ASCII) is in `lowered(s)` exactly where it is in its line's lowered text. The
    places come out ascending: lines in order, each line's ascending."""
    lines = s.split("\n")
    if len(lines) > len(s) // _SHORT_LINES:  # a look-up a line costs more than a scan
        return anchors.scan([s])[0]
    known: list[_Places | None] = list(map(anchors.lines.get, lines))
    if None in known:  # lines not held: each scanned once, then held
        new = list(dict.fromkeys(line for line, found in zip(lines, known, strict=True)
                                 if found is None))
        scanned = dict(zip(new, anchors.scan(new), strict=True))
        known = [scanned[line] if found is None else found
                 for line, found in zip(lines, known, strict=True)]
        for line, found in scanned.items():
            anchors.keep(line, found)
    # line i starts after the characters of the lines before it and i newlines
    before = list(accumulate(map(len, lines), initial=0))
    plain: dict[str, list[int]] = {}
    folded: dict[str, list[int]] | None = {}
    for i in [i for i, found in enumerate(known) if found is not _NOTHING]:
        at, places = before[i] + i, known[i]
        assert places is not None  # every line's places are known by now
        in_line, in_lowered = places
        for anchor, here in in_line.items():
            plain.setdefault(anchor, []).extend([at + p for p in here])
        if in_lowered is None:
            folded = None
        elif folded is not None:
            for anchor, here in in_lowered.items():
                folded.setdefault(anchor, []).extend([at + p for p in here])
    return plain, folded


def _every(text: str, anchor: str) -> list[int]:
    """Every index of `text` where `anchor` starts (overlapping ones too), ascending."""
    out: list[int] = []
    at = text.find(anchor)
    while at >= 0:
        out.append(at)
        at = text.find(anchor, at + 1)
    return out


def _sub_near(pattern: re.Pattern[str], s: str, starts: list[int]) -> str:
    """``pattern.sub(_masked, s)`` when every index where a match of `pattern` in `s` can
    start is in `starts` (ascending; it may hold more).

    Why equal: `sub` masks the leftmost match from index 0, then the leftmost starting at
    or after its end, and so on; ``search`` finds the leftmost one as the first index
    ``p`` at which the pattern matches, trying each index in turn exactly as
    ``pattern.match(s, p)`` does (its look-behinds, ``\\b`` and ``^`` see the whole string
    either way: ``pos`` does not cut it). An index outside `starts` starts no match, so the
    first index of `starts` at or after the last end where ``match`` succeeds is
    ``search``'s. The built-in patterns never match an empty string; were one to, `sub`'s
    own rule for empty matches is kept by running it."""
    out: list[str] = []
    at = 0
    for p in starts:
        if p < at:
            continue
        m = pattern.match(s, p)
        if m is None:
            continue
        if m.end() == p:
            return pattern.sub(_masked, s)
        out += (s[at:p], _masked(m))
        at = m.end()
    if not out:
        return s
    out.append(s[at:])
    return "".join(out)


def redactor(patterns: Iterable[str] = (), defaults: bool = True) -> Redactor:
    """The rules of a run: the built-in secret patterns (unless `defaults` is False) and
    the user's regular expressions (raises `RedactionError` on an invalid one)."""
    user: list[Rule] = []
    for pattern in patterns:
        try:
            user.append(Rule(f"--redact {pattern}", re.compile(pattern), builtin=False))
        except re.error as exc:
            raise RedactionError(f"--redact {pattern!r}: not a regular expression: "
                                 f"{exc}") from None
    return Redactor((SECRET_PATTERNS if defaults else ()) + tuple(user))


_active = Redactor()


def active() -> Redactor:
    """The run's redactor (the built-in patterns until the command line sets one)."""
    return _active


def activate(r: Redactor) -> None:
    """Set the run's redactor (the command line does, once, before any output)."""
    global _active
    _active = r


def opaque_masked(text: str) -> str:
    """A short preview's text with opaque tokens, nonces and e-mail addresses as ``•``
    (at most 8 per token: a preview is short)."""
    return OPAQUE.sub(_opaque, text)


def _opaque(match: re.Match[str]) -> str:
    lead = match.group("lead") or ""
    return lead + MASK * min(len(match.group()) - len(lead), 8)
