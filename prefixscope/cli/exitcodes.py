"""Process exit codes, in one place so `--help` and the docs can list them."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """What `prefixscope` returns to the shell."""

    OK = 0  # done
    ERROR = 1  # bad input (unreadable store, --strict rejected records, unknown request)
    USAGE = 2  # bad command line (Click's own code)
    GATE_FAILED = 3  # `report`'s CI gate: a threshold was breached
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)
    TERMINATED = 143  # SIGTERM (128 + SIGTERM): cleaned up (temporary stores removed)


EXIT_CODES_HELP = ("Exit codes: 0 ok; 1 bad input or --strict rejection; 2 usage error; "
                   "3 report's gate failed; 130 interrupted (Ctrl-C); 143 terminated "
                   "(SIGTERM).")
