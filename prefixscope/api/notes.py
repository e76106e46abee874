"""What the command line prints as a note on stderr (the replay ``auto`` chose, a scope's
size): the library logs it at INFO on the ``prefixscope`` logger and prints nothing."""

from __future__ import annotations


def note(message: str) -> None:
    """What the command line prints as a note: INFO on the ``prefixscope`` logger."""
    import logging

    logging.getLogger("prefixscope").info(message)
