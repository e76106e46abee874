"""prefixscope never reaches the network (docs/security.md).

The main commands run on sample_logs/ in a child process whose sockets refuse every
non-loopback address (a guard installed before prefixscope is imported: connect,
connect_ex, sendto, create_connection and getaddrinfo of a non-local host raise and are
recorded). A refused attempt that some library swallowed would still be a failure: the
test asserts that none was made, not only that the commands succeeded. When this runs as
root with `unshare`, the same run is repeated in a network namespace with no interface
but loopback.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

# not in the fast loop (`pytest -m "not slow"`): every main command in a process without network
pytestmark = pytest.mark.slow

SAMPLES = ROOT / "sample_logs"

# Runs first in the child: every non-loopback socket use raises and is recorded.
GUARD = r'''
import ipaddress, json, socket, sys

ATTEMPTS = []
LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", ""}


def _local(host):
    if host is None:
        return True
    if isinstance(host, bytes):
        host = host.decode()
    host = str(host).split("%")[0]
    if host.lower() in LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost: resolving it is a network use


def _check(what, address):
    if isinstance(address, tuple) and address:
        if not _local(address[0]):
            ATTEMPTS.append(f"{what} {address!r}")
            raise OSError(101, f"network blocked by the test: {what} {address!r}")
    elif isinstance(address, (str, bytes)):
        pass  # an AF_UNIX path: local


_connect, _connect_ex, _sendto = socket.socket.connect, socket.socket.connect_ex, \
    socket.socket.sendto
_getaddrinfo, _create_connection = socket.getaddrinfo, socket.create_connection


def connect(self, address):
    _check("connect", address)
    return _connect(self, address)


def connect_ex(self, address):
    _check("connect_ex", address)
    return _connect_ex(self, address)


def sendto(self, data, *args):
    _check("sendto", args[-1])
    return _sendto(self, data, *args)


def getaddrinfo(host, *args, **kwargs):
    _check("getaddrinfo", (host,))
    return _getaddrinfo(host, *args, **kwargs)


def create_connection(address, *args, **kwargs):
    _check("create_connection", address)
    return _create_connection(address, *args, **kwargs)


socket.socket.connect, socket.socket.connect_ex = connect, connect_ex
socket.socket.sendto = sendto
socket.getaddrinfo, socket.create_connection = getaddrinfo, create_connection
'''

# Then each command through prefixscope's main() (its last-line error handler included).
CHILD = GUARD + r'''
from prefixscope.cli.main import main  # noqa: E402
from prefixscope.store import Store  # noqa: E402

commands, results = json.loads(sys.argv[1]), []
for command in commands:
    if command[:1] == ["render"] and command[1] == "FIRST_ID":
        with Store.open("s.duckdb", read_only=True) as store:
            command[1] = store.run("SELECT id FROM requests WHERE has_body "
                                   "ORDER BY id LIMIT 1")[0][0]
    sys.argv = ["prefixscope", *command]
    try:
        main()
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 1
    results.append([command[0], code])
sys.stderr.write("\nRESULT " + json.dumps({"results": results, "attempts": ATTEMPTS}) + "\n")
'''

COMMANDS = [
    ["ingest", str(SAMPLES), "--store", "s.duckdb", "-q"],
    ["render", "FIRST_ID", "--store", "s.duckdb", "--json"],
    ["render", "FIRST_ID", "--store", "s.duckdb", "--tokenizer", "Qwen/Qwen3-8B", "-q"],
    ["diff", "--all", "--store", "s.duckdb", "-q"],
    ["bucket", "--store", "s.duckdb", "-q"],
    ["segments", "--store", "s.duckdb", "-q"],
    ["simulate", "--store", "s.duckdb", "--no-save", "-q"],
    ["report", "--store", "s.duckdb", "--html", "r.html", "--md", "r.md", "-q"],
    ["sql", "select count(*) from turns", "--store", "s.duckdb"],
    ["export", "--parquet", "out", "--store", "s.duckdb", "-q"],
    ["simulate", str(SAMPLES / "bifrost-mcp-keyorder.jsonl"), "--engine", "anthropic",
     "-q"],
    ["sql", "select * from read_csv('http://192.0.2.1/x.csv')", "--store", "s.duckdb"],
]
# The commands expected to fail, each with one line: a Hugging Face id not in the local
# cache is refused (offline), never fetched; a URL in `sql` is outside the store, which
# is all `sql` may reach (DuckDB's external access is off).
EXPECTED = {2: 1, 11: 1}


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}  # no help from the env
    env["PYTHONPATH"] = str(ROOT)
    env["HF_HOME"] = str(Path("hf-home").resolve())  # an empty hub cache
    return env


def run_guarded(prefix: list[str]) -> tuple[list[list[object]], list[str], str]:
    proc = subprocess.run([*prefix, sys.executable, "-c", CHILD, json.dumps(COMMANDS)],
                          capture_output=True, text=True, timeout=300, env=child_env())
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    marker = proc.stderr.rfind("\nRESULT ")
    assert marker >= 0, (proc.returncode, proc.stderr[-3000:])
    report = json.loads(proc.stderr[marker + len("\nRESULT "):])
    return report["results"], report["attempts"], proc.stderr[:marker]


def check(results: list[list[object]], attempts: list[str], stderr: str) -> None:
    assert attempts == [], attempts
    assert [r[0] for r in results] == [c[0] for c in COMMANDS]
    for i, (name, code) in enumerate(results):
        assert code == EXPECTED.get(i, 0), (name, code, stderr[-3000:])
    refused = [ln for ln in stderr.splitlines() if ln.startswith("error: ")]
    assert len(refused) == 2, refused
    assert "Qwen/Qwen3-8B" in refused[0], refused
    assert ('Cannot access file "http://192.0.2.1/x.csv" - file system operations are '
            "disabled by configuration") in refused[1], refused
    assert Path("out/requests.parquet").is_file()


def test_the_guard_refuses_and_records_remote_addresses_only():
    probe = GUARD + r'''
import socket
for address in (("192.0.2.1", 443), ("example.com", 80)):
    try:
        socket.create_connection(address, timeout=1)
    except OSError as exc:
        assert "blocked by the test" in str(exc), exc
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
socket.create_connection(server.getsockname(), timeout=5).close()
print(json.dumps(ATTEMPTS))
'''
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["create_connection ('192.0.2.1', 443)",
                                      "create_connection ('example.com', 80)"]


def test_the_main_commands_never_reach_the_network():
    results, attempts, stderr = run_guarded([])
    check(results, attempts, stderr)


def _can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(["unshare", "-n", "true"], capture_output=True,
                              timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.mark.skipif(not _can_unshare(), reason="unshare -n needs root (or user namespaces)")
def test_the_main_commands_run_in_a_namespace_without_network():
    results, attempts, stderr = run_guarded(["unshare", "-n"])
    check(results, attempts, stderr)
