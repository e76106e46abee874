"""Secrets in logs never reach an output: the built-in patterns, --redact, and every sink.

The fake secrets are assembled from pieces at run time (so no secret scanner flags this
file) in each vendor's documented shape; the expected masks are written by hand: the
kept prefix, then one ``•`` per masked character (masking keeps the length).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st
from report_scenarios import write_session
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.cli.privacy import hoisted
from prefixscope.model.redaction import (
    _NEAR_MAX,
    _NEAR_MIN,
    MASK,
    SECRET_PATTERNS,
    Redactor,
    Rule,
    _anchors,
    _masked,
    _text,
    activate,
    lowered,
    redactor,
)

runner = CliRunner()

ANT_BODY = "api03-" + "Zq7" * 31 + "AA"  # 99 chars: 93 + "AA" after "api03-"
ANTHROPIC = "sk-" + "ant-" + ANT_BODY
OPENAI_PROJ = "sk-" + "proj-" + "Xy9" * 20 + "T3Blbk" + "FJ" + "Ab4" * 20
NEWAPI = "sk-" + "Ab1Cd2Ef3Gh4" * 4  # a gateway key: sk- and 48 letters and digits
GOOGLE = "AI" + "za" + "Sy" + "B7" * 16 + "x"  # 35 after the prefix
GITHUB = "gh" + "p_" + "a1B2c3" * 6
GITHUB_FINE = "github" + "_pat_" + "11ABCDEFG0" + "x" * 72
SLACK = "xo" + "xb-" + "1234567890-1234567890-" + "AbCdEfGh" * 3
AWS = "AK" + "IA" + "QWERTYUI" + "OPASDF23"
JWT = ("ey" + "JhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9" + ".ey" + "JzdWIiOiIxMjM0NTY3ODkwIn0"
       + "." + "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
PEM_BODY = "\n".join(["MIIEowIBAAKCAQEA" + "q3Zx" * 12] * 4)
PEM = ("-----BEGIN " + "RSA PRIVATE KEY-----\n" + PEM_BODY + "\n-----END RSA PRIVATE KEY-----")
CUSTOM = "ACME-INTERNAL-7731"  # a deployment's own token, masked only with --redact
# gitleaks' shapes (config/gitleaks.toml; the rule ids are in model/redaction.py)
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYzq7Zq7Zq7Z"  # 40 of base64's alphabet
SLACK_HOOK = "https://hooks.slack" + ".com/services/" + "T0A1B2C3D/B0A1B2C3D/" + "Zq7x" * 6
STRIPE = "sk" + "_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
HUGGING_FACE = "hf" + "_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"  # 34 letters
GITLAB = "gl" + "pat-" + "Zq7x-Zq7x_Zq7xZq7xZq7"  # 21 after the prefix
# issue 39's shapes (gitleaks: npm-access-token, pypi-upload-token, sendgrid-api-token,
# vault-service-token, databricks-api-token, twilio-api-key, digitalocean-pat,
# telegram-bot-api-token; an Azure storage connection string's AccountKey)
NPM = "np" + "m_" + "a1B2c3D4e5" * 3 + "F6g7H8"  # 36 letters and digits
PYPI = "py" + "pi-" + "AgEIcHlwaS5vcmc" + "CJDk2MGQtNz" * 6  # the macaroon, then 66
SENDGRID = ("S" + "G." + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7O" + "."
            + "Pq8Rs9Tu0Vw1Xy2Za3Bc4De5Fg6Hi7Jk8Lm9No0Pq1R")
AZURE_KEY = "Zq7xY2" * 14 + "ab" + "=="  # 86 of base64's alphabet and "=="
AZURE = ("DefaultEndpointsProtocol=https;AccountName=acct;Account" + "Key=" + AZURE_KEY
         + ";EndpointSuffix=core.windows.net")
VAULT = "hv" + "s." + "CAESI" + "Zq7x_Y2-" * 12  # 101 after the prefix
DATABRICKS = "da" + "pi" + "0123456789abcdef" * 2
TWILIO = "S" + "K" + "0123456789abcdef" * 2
TWILIO_SID = "A" + "C" + "fedcba9876543210" * 2
DIGITALOCEAN = "do" + "p_v1_" + "0123456789abcdef" * 4
TELEGRAM_ID, TELEGRAM_KEY = "123456789", "A" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv_W"  # 35


@pytest.fixture(autouse=True)
def _default_redaction_after_each_test():
    """A run's options set the process's redactor: later tests get the default again."""
    yield
    activate(Redactor())


def bullets(s: str) -> str:
    return re.sub(r"[^\n]", MASK, s)


# (name, text, expected) -- the expected mask by hand: kept prefix + one bullet a char.
MASKED = [
    ("anthropic", ANTHROPIC, "sk-ant-" + bullets(ANT_BODY)),
    ("openai project", OPENAI_PROJ, "sk-proj-" + bullets(OPENAI_PROJ[8:])),
    ("new-api gateway key", NEWAPI, "sk-" + bullets(NEWAPI[3:])),
    ("google", GOOGLE, "AIza" + bullets(GOOGLE[4:])),
    ("github", GITHUB, "ghp_" + bullets(GITHUB[4:])),
    ("github fine-grained", GITHUB_FINE, "github_pat_" + bullets(GITHUB_FINE[11:])),
    ("slack", SLACK, "xoxb-" + bullets(SLACK[5:])),
    ("aws", AWS, "AKIA" + bullets(AWS[4:])),
    ("jwt", JWT, "ey" + bullets(JWT[2:])),
    ("private key", PEM, PEM.split("\n")[0] + "\n" + bullets(PEM_BODY) + "\n"
     + "-----END RSA PRIVATE KEY-----"),
    ("authorization header", "Authorization: Bearer abc.DEF-123_xyz/7890",
     "Authorization: Bearer " + bullets("abc.DEF-123_xyz/7890")),
    ("basic auth in JSON", '"authorization": "Basic dXNlcjpwYXNzd29yZDEyMw=="',
     '"authorization": "Basic ' + bullets("dXNlcjpwYXNzd29yZDEyMw==") + '"'),
    ("x-api-key header", "x-api-key: k3y-" + "9" * 20, "x-api-key: " + bullets("k3y-" + "9" * 20)),
    ("bearer key keeps its kind", "Authorization: Bearer " + ANTHROPIC,
     "Authorization: Bearer sk-ant-" + bullets(ANT_BODY)),
    ("password in a URL", "postgres://admin:" + "s3cr3t-Pa55" + "@db.internal:5432/app",
     "postgres://admin:" + bullets("s3cr3t-Pa55") + "@db.internal:5432/app"),
    ("slack webhook", SLACK_HOOK,
     "https://hooks.slack.com/services/" + bullets(SLACK_HOOK[33:])),
    ("aws secret next to its key id", f"{AWS} {AWS_SECRET}",
     "AKIA" + bullets(AWS[4:]) + " " + bullets(AWS_SECRET)),
    ("aws secret in a credentials file", f"aws_secret_access_key = {AWS_SECRET}",
     "aws_secret_access_key = " + bullets(AWS_SECRET)),
    ("stripe live key", STRIPE, "sk_live_" + bullets(STRIPE[8:])),
    ("hugging face token", HUGGING_FACE, "hf_" + bullets(HUGGING_FACE[3:])),
    ("gitlab token", GITLAB, "glpat-" + bullets(GITLAB[6:])),
    ("password= pair", "login user=dev password=" + "hunter2", "login user=dev password="
     + bullets("hunter2")),
    ("passwd: pair", "passwd: " + "S3cr3t!pw", "passwd: " + bullets("S3cr3t!pw")),
    ("password in JSON", '{"password": "' + "plainword" + '"}',
     '{"password": "' + bullets("plainword") + '"}'),
    ("a token after _ in a file name", "log_" + GITHUB + ".jsonl",
     "log_ghp_" + bullets(GITHUB[4:]) + ".jsonl"),
    ("npm token", NPM, "npm_" + bullets(NPM[4:])),
    ("pypi upload token", PYPI, "pypi-" + bullets(PYPI[5:])),
    ("sendgrid key", SENDGRID, "SG." + bullets(SENDGRID[3:])),
    ("azure storage account key", AZURE, AZURE.replace(AZURE_KEY, bullets(AZURE_KEY))),
    ("vault service token", VAULT, "hvs." + bullets(VAULT[4:])),
    ("databricks token", DATABRICKS, "dapi" + bullets(DATABRICKS[4:])),
    ("twilio api key", TWILIO, "SK" + bullets(TWILIO[2:])),
    ("twilio account sid", TWILIO_SID, "AC" + bullets(TWILIO_SID[2:])),
    ("digitalocean token", DIGITALOCEAN, "dop_v1_" + bullets(DIGITALOCEAN[7:])),
    ("telegram bot token", f"{TELEGRAM_ID}:{TELEGRAM_KEY}",
     f"{TELEGRAM_ID}:" + bullets(TELEGRAM_KEY)),
]

UNTOUCHED = [
    "x-anthropic-billing-header: cc_version=2.1.37.0d9; cc_entrypoint=cli; cch=fa690;",
    "request 0a1b2c3d4e5f60718293a4b5c6d7e8f9 and 9f3c2a71-4b8e-4d2f-a6c1-3e5b7d9f0a12",
    "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "Authorization: required for every call",  # a word is prose, not a credential
    "sk-learn is a nickname; sk-1234 is too short",
    "task-abcdefghijklmnopqrstu12345 and risk-0123456789abcdefghij",  # no word boundary
    "the bearer of bad news",
    "akiaqwertyuiopasdf23 is lower case",
    "AIzaShort",
    "-----BEGIN PUBLIC KEY----- is not a private one",
    "http://localhost:8080/v1/chat and https://example.com/u/a:b@c",  # no user:password@
    "git@github.com:org/repo.git and mailto:dev@example.com",
    "password: required for every login",  # prose
    "sk_live_short and hf_tooShort and glpat-short",
    "AKIA is a prefix; " + "Q" * 40 + " is 40 letters with no key id before it",
    # issue 39's shapes, each one character short or in a longer word
    NPM[:-1] + " and " + "x" + NPM,
    "py" + "pi-" + "AgEIcHlwaS5vcmc" + "CJDk2MGQ" * 6 + "x",  # 49 after the macaroon
    SENDGRID[:-1] + " ",
    "AccountKey=" + AZURE_KEY[:-3] + "==",
    VAULT[:90] + " and hvs.short",
    DATABRICKS[:-1] + " and dapi" + "g" * 32,
    TWILIO[:-1] + " and SKU" + "0123456789abcdef" * 2 + " and " + "x" + TWILIO,
    DIGITALOCEAN[:-1],
    f"{TELEGRAM_ID}:{TELEGRAM_KEY[:-1]} and 1234:{TELEGRAM_KEY} and {TELEGRAM_ID}:B"
    + TELEGRAM_KEY[1:],
]


class TestPatterns:
    @pytest.mark.parametrize(("name", "text", "expected"), MASKED, ids=[m[0] for m in MASKED])
    def test_each_default_pattern_masks_its_secret_keeping_the_kind_and_the_length(
            self, name: str, text: str, expected: str) -> None:
        got = Redactor().text(f"before {text} after")
        assert got == f"before {expected} after"

    @pytest.mark.parametrize("text", UNTOUCHED)
    def test_near_misses_ids_hashes_and_nonces_are_left_alone(self, text: str) -> None:
        assert Redactor().text(text) == text

    def test_an_unterminated_private_key_masks_its_body(self) -> None:
        head = "-----BEGIN " + "OPENSSH PRIVATE KEY-----"
        text = f"{head}\nb3BlbnNzaC1rZXktdjEAAAAA\nQQQQ"
        assert Redactor().text(text) == f"{head}{bullets(chr(10) + 'b3BlbnNzaC1rZXktdjEAAAAA')}" \
                                        f"{bullets(chr(10) + 'QQQQ')}"

    def test_a_user_regex_masks_its_matches_and_the_defaults_can_be_turned_off(self) -> None:
        text = f"{CUSTOM} {NEWAPI}"
        assert redactor([r"ACME-[A-Z]+-\d+"]).text(text) == \
            bullets(CUSTOM) + " sk-" + bullets(NEWAPI[3:])
        assert redactor([r"ACME-[A-Z]+-\d+"], defaults=False).text(text) == \
            bullets(CUSTOM) + " " + NEWAPI
        assert redactor([], defaults=False).text(text) == text

    def test_a_bad_regex_is_named(self) -> None:
        with pytest.raises(ValueError, match=r"--redact '\(': not a regular expression"):
            redactor(["("])


@dataclass(frozen=True)
class _Inner:
    text: str
    n: int


@dataclass(frozen=True)
class _Outer:
    items: tuple[_Inner, ...]
    extra: dict[str, object]


class TestValues:
    def test_every_string_in_nested_values_and_dataclasses_is_masked(self) -> None:
        value = _Outer((_Inner(f"key {GITHUB}", 3),), {"list": [AWS, 7, None]})
        got = Redactor().value(value)
        assert got == _Outer((_Inner("key ghp_" + bullets(GITHUB[4:]), 3),),
                             {"list": ["AKIA" + bullets(AWS[4:]), 7, None]})

    def test_a_value_with_nothing_to_mask_comes_back_as_the_same_object(self) -> None:
        value = _Outer((_Inner("plain text", 3),), {"list": ["cch=fa690", 7]})
        assert Redactor().value(value) is value

    def test_a_dataclass_held_in_two_places_is_masked_in_both(self) -> None:
        # (a report holds its ledger twice: as its own and in its evidence)
        shared = _Inner(f"key {GITHUB}", 3)
        got = Redactor().value(_Outer((shared, _Inner("plain", 1), shared), {"again": shared}))
        masked = _Inner("key ghp_" + bullets(GITHUB[4:]), 3)
        assert got == _Outer((masked, _Inner("plain", 1), masked), {"again": masked})
        plain = _Inner("plain", 2)
        value = _Outer((plain, plain), {"again": plain})
        assert Redactor().value(value) is value

    def test_texts_equal_to_ones_masked_before_come_back_as_themselves(self) -> None:
        # the caches hold the first such string; a record built from another equal one
        # must not be copied because the cached string is another object
        short, long = "".join(["claude-", "sonnet"]), "".join(["x" * 300, "y"])
        Redactor().value(_Inner(short, 1)), Redactor().value(_Inner(long, 1))
        again = _Inner("".join(["claude-", "sonnet"]), 2)
        assert again.text is not short
        assert Redactor().value(again) is again
        longer = _Inner("".join(["x" * 300, "y"]), 2)
        assert Redactor().value(longer) is longer

    def test_keys_get_the_builtin_patterns_only_and_credential_headers_are_masked_whole(
            self) -> None:
        r = redactor(["session"])
        got = r.value({"session": "a session id", NEWAPI: 1,
                       "Authorization": "Bearer short", "x-api-key": "plainword",
                       "token_a": "session"})
        assert got == {"session": "a " + bullets("session") + " id",
                       "sk-" + bullets(NEWAPI[3:]): 1,
                       "Authorization": "Bearer " + bullets("short"),
                       "x-api-key": bullets("plainword"),
                       "token_a": bullets("session")}

    def test_a_rendering_split_by_escape_sequences_is_still_masked(self) -> None:
        styled = "A: \x1b[1m" + ANTHROPIC[:20] + "\x1b[0m" + ANTHROPIC[20:] + " end"
        masked = Redactor().text(ANTHROPIC)
        assert Redactor().styled(styled) == ("A: \x1b[1m" + masked[:20] + "\x1b[0m"
                                             + masked[20:] + " end")


# Values as a report holds them: counts, rates, flags, short texts seen many times (ids,
# names), long texts, secrets in either, a credential header's plain value, nested in
# lists, tuples, dicts and dataclasses, one value held in two places.
_VALUE_TEXTS = st.sampled_from(["claude-sonnet", "session-42", "a1b2", "", "x" * 300,
                                f"key {GITHUB}", AWS, "y" * 280 + " " + NEWAPI, "session",
                                "Bearer " + "tok3n." * 5])
_VALUE_KEYS = st.sampled_from(["model", "session", "session-42", NEWAPI])
_VALUES = st.recursive(
    st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans(), st.none(),
              _VALUE_TEXTS),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(_VALUE_KEYS, inner, max_size=3),
        st.dictionaries(st.just("x-api-key"), st.one_of(st.integers(), st.none())),
        inner.map(lambda held: (held, held)),  # one value in two places
        st.builds(_Inner, _VALUE_TEXTS, st.integers()),
        st.builds(_Outer, st.lists(st.builds(_Inner, _VALUE_TEXTS, st.integers()),
                                   max_size=3).map(tuple),
                  st.dictionaries(_VALUE_KEYS, inner, max_size=3))),
    max_leaves=12)


def _each_string_masked(value: object, rules: tuple[Rule, ...]) -> object:
    """The oracle: every string in `value` with each of `rules` run over it in order (a
    mapping's keys with the built-in ones only; a credential header's value, drawn here
    only as a number or None, as it is)."""
    def masked(text: str, by: tuple[Rule, ...]) -> str:
        for rule in by:
            text = rule.pattern.sub(_masked, text)
        return text
    if isinstance(value, str):
        return masked(value, rules)
    if isinstance(value, dict):
        return {masked(k, SECRET_PATTERNS): _each_string_masked(v, rules)
                for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_each_string_masked(v, rules) for v in value)
    if isinstance(value, _Inner):
        return _Inner(masked(value.text, rules), value.n)
    if isinstance(value, _Outer):
        return _Outer(tuple(_Inner(masked(i.text, rules), i.n) for i in value.items),
                      _each_string_masked(value.extra, rules))
    return value


@settings(max_examples=300, deadline=None)
@given(_VALUES, st.booleans())
def test_a_value_walked_has_each_string_masked_and_comes_back_itself_where_none_is(
        value: object, user_rule: bool) -> None:
    """`Redactor.value` against each string masked by the rules, one after another, and
    the value itself where nothing in it is masked; walked twice (the second time every
    short text is in the cache)."""
    r = redactor([r"session-\d+"]) if user_rule else Redactor()
    want = _each_string_masked(value, r.rules)
    for _ in range(2):
        got = r.value(value)
        assert got == want and type(got) is type(want)
        if want == value:
            assert got is value


class TestOptionPlacement:
    def test_privacy_options_after_the_command_move_before_it(self) -> None:
        commands = {"report": None, "sql": None}
        assert hoisted(["report", "LOGS", "--redact", "x", "--html", "r.html",
                        "--no-default-redaction", "--redact=y"], commands) == \
            ["--redact", "x", "--no-default-redaction", "--redact=y", "report", "LOGS",
             "--html", "r.html"]
        assert hoisted(["--redact", "report", "sql", "q", "--", "--redact", "z"], commands) == \
            ["--redact", "report", "sql", "q", "--", "--redact", "z"]

    def test_a_bad_regex_is_one_line_and_exit_2(self) -> None:
        result = runner.invoke(app, ["sql", "select 1", "--redact", "("])
        assert result.exit_code == 2
        assert result.stderr.strip().splitlines() == [
            "error: --redact '(': not a regular expression: missing ), unterminated "
            "subpattern at position 0"]
        assert "Traceback" not in result.output


# --- end to end: a capture with secrets planted, through every command ----------------

SECRETS = {"anthropic": ANT_BODY, "pem": PEM_BODY.split("\n")[0][16:], "github": GITHUB[4:],
           "google": GOOGLE[4:]}
HEADER_ONLY = "x-stainless-planted-header-value"  # a request header nobody asked for
OUTPUTS = ("r.html", "r.md", "r.json", "r.xml", "baseline.json")  # the files report writes
CONTROL_SEQ = "\x1b]0;pwned\x07\x1b[2J\x08"  # set the title, clear the screen, backspace


def _planted_log(folder: Path) -> Path:
    """The three-turn Claude Code capture with secrets in the system prompt (after the
    volatile billing header, so a diff's excerpt window cuts through one), a message,
    the request headers, a token of the deployment's own, and terminal control
    sequences just before the billing header's nonce (inside the diff's window)."""
    lines = (ROOT / "tests/fixtures/raw/claude_code_capture.jsonl").read_text().splitlines()
    out = []
    for line in lines:
        record = json.loads(line)
        record["headers"]["authorization"] = "Bearer " + ANTHROPIC
        record["headers"]["x-api-key"] = ANTHROPIC
        record["headers"]["x-stainless-os"] = HEADER_ONLY
        system = record["request"]["system"]
        system[0]["text"] = system[0]["text"].replace("cc_entrypoint=cli;",
                                                      f"cc_entrypoint=cli{CONTROL_SEQ};")
        # The pair's 40-character window after the nonce ends 16 characters into the key.
        system[0]["text"] += f" key={ANTHROPIC}"
        system[1]["text"] += (f"\nAuthorization: Bearer {ANTHROPIC}\n{PEM}\n"
                              f"GOOGLE_KEY={GOOGLE} token {GITHUB} {CUSTOM}")
        record["request"]["messages"][0]["content"][1]["text"] += f" my key is {ANTHROPIC}"
        out.append(json.dumps(record))
    path = folder / "planted.jsonl"
    path.write_text("\n".join(out) + "\n")
    return path


def _leaks(text: str, secrets: dict[str, str]) -> list[str]:
    """Which secrets show any 6 consecutive characters of their secret part (a window
    cut through a key must not show its inner part either)."""
    return [name for name, s in secrets.items()
            if any(s[i:i + 6] in text for i in range(len(s) - 5))]


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str]]:
    folder = tmp_path_factory.mktemp("planted")
    log = _planted_log(folder)
    store = folder / "planted.duckdb"
    result = runner.invoke(app, ["ingest", str(log), "--store", str(store)])
    assert result.exit_code == 0, result.output
    ids = runner.invoke(app, ["sql", "select id from requests order by timestamp",
                              "--store", str(store), "--csv"]).stdout.split()[1:]
    assert len(ids) == 3
    return folder, store, ids


def _commands(store: Path, ids: list[str], folder: Path) -> list[list[str]]:
    s = ["--store", str(store)]
    files = [str(folder / n) for n in OUTPUTS]
    return [
        ["ingest", str(folder / "planted.jsonl"), "--store", str(folder / "again.duckdb")],
        ["ingest", str(folder / "planted.jsonl"), "--store", str(folder / "again2.duckdb"),
         "--json"],
        ["render", ids[1], *s], ["render", ids[1], *s, "--show-text"],
        ["render", ids[1], *s, "--json", "--show-text"],
        # The pair's excerpt window ends inside the key after the billing header.
        ["diff", ids[0], ids[1], *s], ["diff", ids[0], ids[1], *s, "--json"],
        ["diff", "--all", *s], ["diff", "--all", *s, "--json"],
        ["diff", "--session", "9f3c2a71-4b8e-4d2f-a6c1-3e5b7d9f0a12", *s],
        ["segments", *s], ["segments", *s, "--show-text"],
        ["segments", *s, "--show-text", "--json"],
        ["bucket", *s], ["bucket", *s, "--json"],
        ["simulate", *s], ["simulate", *s, "--json"],
        ["report", *s, "--html", files[0], "--md", files[1], "--json-file", files[2],
         "--junit", files[3], "--write-baseline", files[4]],
        ["report", *s, "--json"],
        ["calls", *s], ["calls", *s, "--json"],
        ["sql", "select * from requests join bodies on hash = body_hash", *s, "--json"],
        ["sql", "select * from requests join bodies on hash = body_hash", *s, "--csv"],
        ["sql", "select * from requests join bodies on hash = body_hash", *s],
    ]


def _run_all(store: Path, ids: list[str], folder: Path, prefix: list[str]) -> str:
    """Every command's stdout, stderr and written files, concatenated."""
    seen = []
    for args in _commands(store, ids, folder):
        result = runner.invoke(app, [*prefix, *args])
        assert result.exit_code in (0, 3), (args, result.output)
        seen += [result.stdout, result.stderr]
    for name in OUTPUTS:
        seen.append((folder / name).read_text())
        (folder / name).unlink()
    return "\n".join(seen)


class TestNothingLeaks:
    def test_no_secret_reaches_any_output_of_any_command(
            self, planted: tuple[Path, Path, list[str]]) -> None:
        folder, store, ids = planted
        everything = _run_all(store, ids, folder, [])
        assert _leaks(everything, SECRETS) == []
        assert "sk-ant-" + MASK * 10 in everything  # the masks are there: the run showed text
        assert CUSTOM in everything  # not a default pattern

    def test_a_user_regex_masks_its_token_everywhere_wherever_the_option_is_written(
            self, planted: tuple[Path, Path, list[str]]) -> None:
        folder, store, ids = planted
        everything = _run_all(store, ids, folder, ["--redact", r"ACME-[A-Z]+-\d+"])
        assert _leaks(everything, {"custom": CUSTOM}) == []
        after = runner.invoke(app, ["render", ids[1], "--store", str(store), "--show-text",
                                    "--redact", r"ACME-[A-Z]+-\d+"])
        assert after.exit_code == 0 and CUSTOM not in after.stdout and bullets(CUSTOM) in \
            after.stdout

    def test_the_environment_variable_adds_patterns(
            self, planted: tuple[Path, Path, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
        _, store, ids = planted
        monkeypatch.setenv("PREFIXSCOPE_REDACT", "nothing-matches-this\nACME-[A-Z]+-\\d+")
        result = runner.invoke(app, ["render", ids[1], "--store", str(store), "--show-text"])
        assert CUSTOM not in result.stdout and bullets(CUSTOM) in result.stdout

    def test_without_default_redaction_the_secrets_show(
            self, planted: tuple[Path, Path, list[str]]) -> None:
        _, store, ids = planted
        result = runner.invoke(app, ["--no-default-redaction", "render", ids[1],
                                     "--store", str(store), "--show-text"])
        assert _leaks(result.stdout, SECRETS) == ["anthropic", "pem", "github", "google"]

    def test_request_headers_are_not_printed_unless_asked(
            self, planted: tuple[Path, Path, list[str]]) -> None:
        folder, store, ids = planted
        for args in _commands(store, ids, folder):
            if args[0] == "sql":
                continue
            result = runner.invoke(app, ["--no-default-redaction", *args])
            assert HEADER_ONLY not in result.stdout + result.stderr, args
        for name in OUTPUTS:
            assert HEADER_ONLY not in (folder / name).read_text()
        # Asked for: `sql` over the stored metadata shows the headers kept, and the
        # credential headers were never stored at all.
        asked = runner.invoke(app, ["--no-default-redaction", "sql",
                                    "select metadata from requests", "--store", str(store),
                                    "--json"])
        assert HEADER_ONLY in asked.stdout
        assert "authorization" not in asked.stdout.lower()
        assert "x-api-key" not in asked.stdout.lower()


class TestMaskedOnce:
    """The library masks its results; the command line prints them and masks nothing
    again: both give the same values."""

    def test_the_library_and_the_command_give_the_same_masked_documents(
            self, planted: tuple[Path, Path, list[str]]) -> None:
        import prefixscope as ps

        _, store, ids = planted
        query = "select * from requests join bodies on hash = body_hash"
        ps.redact()  # the defaults, as a run without privacy options
        with ps.open(store) as st:
            pairs = (
                (["report"], ps.report(st).to_dict()),
                (["calls"], ps.calls(st).to_dict()),
                (["diff", ids[0], ids[1]], ps.diff(st, ids[0], ids[1]).to_dict()),
                (["render", ids[1], "--show-text"],
                 ps.render(st, ids[1]).to_dict(show_text=True)),
                (["segments", "--show-text"], ps.segments(st, show_text=True).to_dict()),
                (["bucket"], ps.bucket(st).to_dict()),
                (["sql", query], ps.sql(st, query).to_dict()))
            library = json.loads(json.dumps([doc for _, doc in pairs], ensure_ascii=False,
                                            default=str))
        printed = []
        for args, _ in pairs:
            result = runner.invoke(app, [*args, "--store", str(store), "--json"])
            assert result.exit_code in (0, 3), (args, result.output)
            printed.append(json.loads(result.stdout))
        assert printed == library
        text = json.dumps(library, ensure_ascii=False)
        assert _leaks(text, SECRETS) == []
        assert "sk-ant-" + MASK * 10 in text

    def test_the_console_writes_what_it_is_given(self, capsys: pytest.CaptureFixture[str]
                                                 ) -> None:
        """Its stdout sinks do not mask: a secret there would be the library's leak, which
        the test above and TestNothingLeaks look for."""
        from prefixscope.cli import console

        activate(redactor())
        console.print_json({"key": ANTHROPIC})
        console.write_raw(ANTHROPIC)
        assert json.loads(capsys.readouterr().out.removesuffix(ANTHROPIC))["key"] == ANTHROPIC


def test_no_command_sends_a_logged_control_sequence_to_the_terminal(
        planted: tuple[Path, Path, list[str]]) -> None:
    """ESC, BEL and backspace from a log are shown as \\xNN on stdout and stderr.
    (`render --show-text` piped and `sql --csv` write the text byte for byte: they are
    data, not a terminal screen (docs/security.md), and are left out.)"""
    folder, store, ids = planted
    for args in _commands(store, ids, folder):
        if (args[0] == "render" and "--show-text" in args and "--json" not in args) \
                or "--csv" in args:
            continue
        result = runner.invoke(app, args)
        assert not any(c in result.stdout + result.stderr for c in "\x1b\x07\x08"), args
    pair = runner.invoke(app, ["diff", ids[0], ids[1], "--store", str(store)])
    assert "cli\\x1b]0;pwned\\x07\\x1b[2J\\x08; cch=" in pair.stdout


def test_a_reports_excerpt_whose_window_starts_inside_a_key_shows_none_of_it(
        tmp_path: Path) -> None:
    """A system prompt ending in a key, then a line that changes every turn: the report's
    window around each split (40 characters before it) starts inside the key, so it is
    masked before it is cut -- cut first, what is left of the key is no key the whole
    report's masking finds. The terminal, Markdown and HTML excerpts show the 12 characters
    before the change as the key's last 6, masked, and ``\\nturn ``."""
    def key_then_turn(turn: int, request: dict[str, Any]) -> None:
        request["messages"][0]["content"] += f"\nANTHROPIC_API_KEY={ANTHROPIC}\nturn {turn}"

    log = write_session(tmp_path / "key.jsonl", turns=4, change=key_then_turn)
    md, page = tmp_path / "r.md", tmp_path / "r.html"
    result = runner.invoke(app, ["report", str(log), "--md", str(md), "--html", str(page)])
    assert result.exit_code == 0, result.output
    for text in (result.stdout, md.read_text(), page.read_text()):
        assert "\u2022" * 6 + "\\nturn 0" in text  # the excerpt of the first pair, masked
        assert _leaks(text, {"anthropic": ANT_BODY}) == []


_PLANTED = ("sk-ant-api03-" + "Ab3_" * 12, "ghp_" + "x1Y2" * 9, "AKIA" + "QWERTY234567ABCD",
            "-----BEGIN RSA PRIVATE KEY-----\n" + ("MIIEow" * 11 + "\n") * 60
            + "-----END RSA PRIVATE KEY-----")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_PLANTED), st.integers(0, 100_000)), min_size=1,
                max_size=4),
       st.integers(0, 3), st.integers(-600, 4_500), st.integers(1, 400),
       st.sampled_from([" ", "x", "\n", "é"]))
@pytest.mark.slow
def test_a_window_is_masked_as_the_whole_text_cut_there(
        planted: list[tuple[str, int]], pick: int, offset: int, width: int,
        filler: str) -> None:
    text = filler * 100_000
    for secret, at in sorted(planted, key=lambda p: p[1], reverse=True):
        text = text[:at] + " " + secret + " " + text[at:]
    # The window starts near (or inside) one planted secret: where a cut could show part.
    secret = planted[pick % len(planted)][0]
    start = max(0, text.index(secret) + offset)
    r = Redactor()
    assert r.window(text, start, start + width) == r.text(text)[start:start + width]


def _every_rule_masked(text: str) -> str:
    """The oracle: every built-in pattern run over the text, in order, no anchors."""
    for rule in SECRET_PATTERNS:
        text = rule.pattern.sub(_masked, text)
    return text


@pytest.mark.parametrize("rule", SECRET_PATTERNS, ids=lambda r: r.name)
def test_a_text_a_rule_matches_holds_one_of_its_anchors(rule: Rule) -> None:
    assert rule.anchors or rule.folded

    @settings(max_examples=150, deadline=None)
    @given(st.from_regex(rule.pattern, fullmatch=False), st.text(max_size=5),
           st.text(max_size=5))
    def check(drawn: str, before: str, after: str) -> None:
        for text in (drawn, before + drawn + after):
            if rule.pattern.search(text) is not None:
                assert rule.may_match(text, lowered(text))

    check()


_NEAR_RULES = [rule for rule in SECRET_PATTERNS if rule.lead is not None]


@pytest.mark.parametrize("rule", _NEAR_RULES, ids=lambda r: r.name)
def test_every_match_starts_at_most_lead_before_an_anchor(rule: Rule) -> None:
    """`Rule.lead`, what `_sub_near` tries a pattern by: at every index where the pattern
    matches (not only the matches `sub` takes), one of its anchors starts within `lead`
    characters (a folded one in the lowered text, where `lowered` gives one)."""

    @settings(max_examples=150, deadline=None)
    @given(st.from_regex(rule.pattern, fullmatch=False), st.text(max_size=5),
           st.text(max_size=5))
    def check(drawn: str, before: str, after: str) -> None:
        for text in (drawn, before + drawn + after):
            low = lowered(text)
            for p in range(len(text) + 1):
                if rule.pattern.match(text, p) is None:
                    continue
                window = range(p, p + rule.lead + 1)
                assert (any(text.startswith(a, q) for a in rule.anchors for q in window)
                        or (low is not None and any(low.startswith(f, q) for f in rule.folded
                                                    for q in window))
                        or (low is None and rule.folded))  # run over the text then

    check()


def test_a_rule_without_a_lead_is_the_one_whose_anchor_ends_an_unbounded_run() -> None:
    """jwt's ``.ey`` follows ``ey`` and 17 or more characters: no lead bounds it, and its
    pattern runs over a text that holds the anchor (`Rule.may_match`)."""
    assert [rule.name for rule in SECRET_PATTERNS if rule.lead is None] == ["jwt"]


# Where the near-anchor tries of `_sub_near` could go wrong: anchors next to each other,
# inside and after secrets, and more of them than `_NEAR_MAX` (the text is then run whole).
_NEAR_PARTS = st.one_of(
    st.sampled_from([a for rule in SECRET_PATTERNS for a in rule.anchors + rule.folded]),
    st.sampled_from([ANTHROPIC, OPENAI_PROJ, NEWAPI, GOOGLE, GITHUB, SLACK, AWS, PEM,
                     "https://user:p4ss@host.example", "Bearer " + "tok3n." * 5,
                     "SK" + "0123456789abcdef" * 2, "AC" + "f" * 32,
                     "123456789:A" + "b" * 34, "dop_v1_" + "a1" * 32,
                     "X-Goog-Api-Key: k3y" * 2, "proxy-Authorization: Basic dXNlcjpw4ss",
                     "PassWord=hunter2", "hooks.slack.com/services/" + "A1b" * 15,
                     "•", "\u212a", "é"]),
    st.text(alphabet="ACKSab01:/-_.@= \n", max_size=12),
    st.builds(lambda a, n: a * n, st.sampled_from(["AC", "://", "sk-", "earer ", ":A"]),
              st.integers(1, _NEAR_MAX + 10)))


@settings(max_examples=400, deadline=None)
@given(st.lists(_NEAR_PARTS, max_size=10), st.sampled_from(["", " ", "x"]),
       st.sampled_from([" ", "x", "\n", "é"]), st.integers(0, 10))
def test_masking_tried_near_the_anchors_equals_every_pattern_over_the_whole_text(
        parts: list[str], glue: str, filler: str, at: int) -> None:
    # padded past _NEAR_MIN (shorter texts are not tried near their anchors), the filler
    # at any place between the parts
    pad = filler * (_NEAR_MIN + 1)
    text = glue.join([*parts[:at], pad, *parts[at:]])
    assert len(text) > _NEAR_MIN
    assert _text.__wrapped__(SECRET_PATTERNS, text) == _every_rule_masked(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(
    [ANTHROPIC, OPENAI_PROJ, NEWAPI, GOOGLE, GITHUB, GITHUB_FINE, SLACK, AWS, JWT, PEM,
     "Authorization: Bearer " + "tok3n." * 5, "x-api-key: " + "k3y" * 5,
     "PASSWORD=" + "hunter2", "pa\u017f\u017fword: s3cret!", "AUTHORİZATION: Bearer abc123456",
     "https://user:p4ss@host.example", "aws_secret_access_key = " + "A" * 40,
     "AKIAQWERTYUIOPASDF23 then " + "B" * 40, "\u212a", "é", "•"]), st.text(max_size=12)),
    max_size=8))
def test_anchors_never_change_what_is_masked(parts: list[str]) -> None:
    text = " ".join(parts)
    assert Redactor().text(text) == _every_rule_masked(text)


_FOLDED_ANCHORS = sorted({a for rule in SECRET_PATTERNS for a in rule.folded})
# what IGNORECASE may find an anchor's letter as, beyond its two cases
_SPELLINGS = {"i": "\u0130\u0131", "s": "\u017f", "k": "\u212a"}


@st.composite
def _spelled_anchor(draw: st.DrawFn) -> str:
    """A folded anchor, each letter in either case or a character IGNORECASE pairs it
    with, maybe one letter dropped."""
    anchor = draw(st.sampled_from(_FOLDED_ANCHORS))
    out = [draw(st.sampled_from(c + c.upper() + _SPELLINGS.get(c, ""))) for c in anchor]
    if draw(st.booleans()):
        del out[draw(st.integers(0, len(out) - 1))]
    return "".join(out)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(_spelled_anchor(),
                          st.text(alphabet="aAiIkKsS-_ \u0130\u0131\u017f\u212a"
                                           "éÄßΣσﬀﬆǅ\u0345\u1e9e", max_size=6)), max_size=5))
def test_a_lowered_text_holds_a_folded_anchor_where_ignorecase_finds_it(parts: list[str]) -> None:
    """`lowered` (what the folded anchors are looked up in) against the regular expression
    engine the rules run on: wherever it gives a text, an anchor is in it exactly where
    IGNORECASE finds the anchor in the text."""
    import re

    text = "".join(parts)
    low = lowered(text)
    if low is None:
        assert any(c in text for c in "\u0130\u0131\u017f\u212a")
        return
    for anchor in _FOLDED_ANCHORS:
        assert (anchor in low) == (re.search(re.escape(anchor), text, re.I) is not None)


def test_no_anchor_holds_a_newline() -> None:
    """What reading a long text's anchor places off its lines rests on
    (`_anchor_places`): every place of an anchor is inside one line."""
    assert not [a for rule in SECRET_PATTERNS for a in rule.anchors + rule.folded if "\n" in a]


def _places_by_looking(s: str) -> tuple[dict[str, list[int]], dict[str, list[int]] | None]:
    """The oracle: every index of `s` (of ``lowered(s)`` for a folded anchor) where each
    built-in anchor starts, tried one index at a time."""
    def at(text: str, anchors: list[str]) -> dict[str, list[int]]:
        found = {a: [i for i in range(len(text)) if text.startswith(a, i)] for a in anchors}
        return {a: places for a, places in found.items() if places}

    low = lowered(s)
    return (at(s, [a for rule in SECRET_PATTERNS for a in rule.anchors]),
            None if low is None else at(low, [a for rule in SECRET_PATTERNS
                                               for a in rule.folded]))


# Lines drawn from a small pool, so that texts repeat lines held from earlier texts (and
# within themselves): anchors at a line's start and end, next to each other, split by a
# newline, and the characters `lowered` refuses.
_LINE_POOL = st.sampled_from(
    ["", "AC", "sk-", "x sk-ant-y", "ACACA", "SK" + "0" * 32, "pass", "w", "PassWord=1",
     "Authorization: Bearer tok3n.tok3n.tok3n.tok", "x-api-key: k3y" * 2, "\u212a", "é x",
     "AKIA" + "QWERTYUIOPASDF23", "https://user:p4ss@host", "ey" + "J" * 20 + ".ey",
     "•" * 3, "İpassw", "plain text", "-----BEGIN", ":A", "earer "])
_LINES = st.lists(st.one_of(_LINE_POOL, st.text(alphabet="ACKSak-_:. \u212aé", max_size=8)),
                  max_size=12)


@settings(max_examples=300, deadline=None)
@given(st.lists(_LINES, min_size=1, max_size=4))
def test_anchor_places_read_off_held_lines_are_those_found_by_looking(
        texts: list[list[str]]) -> None:
    """A text's anchor places from its lines (scanned, or held from an earlier text of
    the same anchors) against looking at every index of the whole text."""
    from unittest import mock

    from prefixscope.model import redaction
    from prefixscope.model.redaction import _anchor_places, _Anchors

    # every text read off its lines (1), or scanned whole as one of short lines is (10**9)
    for short_lines in (1, 10**9):
        anchors = _Anchors(SECRET_PATTERNS)  # its held lines carry over from text to text
        with mock.patch.object(redaction, "_SHORT_LINES", short_lines):
            for lines in [*texts, *texts]:  # each again, every line held by then
                text = "\n".join(lines)
                assert _anchor_places(anchors, text) == _places_by_looking(text)


@settings(max_examples=200, deadline=None)
@given(st.lists(_NEAR_PARTS, max_size=8), st.lists(_NEAR_PARTS, max_size=8),
       st.sampled_from(["\n", " \n", "\n\n"]), st.integers(0, 3))
def test_long_texts_sharing_lines_mask_as_every_pattern_over_the_whole_text(
        first: list[str], second: list[str], glue: str, cut: int) -> None:
    """Two long texts, the second repeating the first's lines (held by then) cut at
    another place and its own after them: each masked as every rule run over it."""
    pad = "x" * (_NEAR_MIN + 1)
    one = glue.join([pad, *first])
    two = glue.join([*first[cut:], pad, *second, *first[:cut]])
    for text in (one, two, one):
        assert _text.__wrapped__(SECRET_PATTERNS, text) == _every_rule_masked(text)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(_PLANTED[:3]), min_size=1, max_size=3),
       st.lists(st.integers(0, 40_000), min_size=1, max_size=3), st.integers(-120, 120),
       st.integers(1, 200))
def test_windows_of_consecutive_turns_mask_as_the_whole_text_cut_there(
        secrets: list[str], places: list[int], offset: int, width: int) -> None:
    """Consecutive turns (each the last one's text and more, a line changed at its head)
    masked in windows placed at and across their planted secrets' edges: each window as
    the whole text masked and cut there, whatever lines the turns before left held."""
    lines = [f"line {i} of the history, a message or a tool's output" for i in range(900)]
    for secret, at in zip(secrets, places, strict=False):
        i = at * len(lines) // 40_001
        lines[i] = lines[i][:at % 30] + secret + lines[i][at % 30:]
    r = Redactor()
    for turn in range(3):
        text = "\n".join([f"billing header cch={turn:05x}", *lines[:600 + 100 * turn]])
        for secret in secrets:
            if secret not in text:
                continue
            edge = text.index(secret) + (0 if offset < 0 else len(secret)) + offset
            start = max(0, edge - width // 2)
            want = _every_rule_masked(text)[start:start + width]
            assert r.window(text, start, start + width) == want


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(
    _spelled_anchor(),
    st.sampled_from([a for rule in SECRET_PATTERNS for a in rule.anchors]),
    st.builds(str.swapcase, st.sampled_from([a for rule in SECRET_PATTERNS
                                             for a in rule.anchors])),
    st.sampled_from([ANTHROPIC, GITHUB, AWS, "https://user:p4ss@host.example", "\u212a"]),
    st.text(alphabet="aAcCiIkKsSyY-_.:/ \u0130\u0131\u017f\u212a\né", max_size=6)),
    max_size=5))
def test_a_text_holds_no_anchor_exactly_where_no_rule_may_match(parts: list[str]) -> None:
    """`_Anchors.none_in` (one search for every rule's anchors, before a short text's
    rules are asked one by one) against each rule's own check; where it holds, every
    pattern run over the text leaves it as it is."""
    text = "".join(parts)
    none = _anchors(SECRET_PATTERNS).none_in(text)
    assert none == (not any(rule.may_match(text, lowered(text)) for rule in SECRET_PATTERNS))
    if none:
        assert _every_rule_masked(text) == text
    assert _text.__wrapped__(SECRET_PATTERNS, text) == _every_rule_masked(text)


def test_a_rule_without_anchors_runs_on_every_text() -> None:
    """A user's ``--redact`` has no anchors: no text is passed over for holding none."""
    rules = redactor(["zz"]).rules
    assert not _anchors(rules).none_in("no anchor here")
    assert Redactor(rules).text("a zz b") == "a " + MASK * 2 + " b"
