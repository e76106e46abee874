"""The names of the what-ifs a report prices from the log's usage and its ledger (its TTL
choices, pinning each session to one backend), apart from the code that prices them
(`findings.ttl_choice`, `findings.pinning`): the command line lists them in its help
without importing the findings (and numpy, DuckDB with them) to print ``--help``."""

from __future__ import annotations

TTL_WHAT_IFS = ("ttl-1h", "keep-warm")  # 1-hour cache writes; pings through pauses
PIN_BACKEND = "pin-backend"  # every session's calls on one backend (the routing loss)
# the cheapest TTL choice and pinning per kind of request (`findings.policy`)
POLICY = "policy"
# Priced from the ledger, with no replay of rendered prompts: a bundle prices them too.
LEDGER_WHAT_IFS = (*TTL_WHAT_IFS, PIN_BACKEND, POLICY)
