"""`Error`: the one exception the public API raises (`prefixscope.Error`, docs/api.md).

It is defined at the bottom of the layers so that every layer the API's values come from
(the results' `to_polars`, the store's frames) can raise it too. Its message is the one
line the command line prints after ``error:`` for the same mistake; `usage` says whether
the mistake is in an option (the command line exits 2) or in the input (exit 1).
"""

from __future__ import annotations


class Error(Exception):
    """A call cannot do what it was asked: a bad option, unreadable input, an empty scope.

    ``str(error)`` is one line, the same the command line prints for the same mistake.
    `usage` is True for an option's value (the command line exits 2), False for the input
    (exit 1). `result` holds what was done before the failure when that is worth showing:
    the `IngestResult` of an ingest `strict` rejected.
    """

    def __init__(self, message: str, *, usage: bool = False, result: object = None) -> None:
        super().__init__(message)
        self.usage = usage
        self.result = result
