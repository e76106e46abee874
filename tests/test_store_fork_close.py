"""A forked worker's copy of its parent's open store (`parallel.Pool(fork=True)` forks the
analyses' workers while the report holds the store open, read-only) must not be closed by
the child: DuckDB tears down the database instance the copy shares with the parent's
copied memory, and the child dies (SIGSEGV, seen by the review of c7a137f). `Store.close`
in another process than the one that opened the store does nothing.

The oracle: the child's exit status as the operating system reports it, and the parent's
store answering the same query after the child is gone.
"""

from __future__ import annotations

import os
from pathlib import Path

from prefixscope.store import Store

QUERY = "select count(*), sum(range) from range(3000000)"


def test_a_forked_child_closing_the_parents_store_exits_cleanly(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    Store.open(path).close()
    with Store.open(path, read_only=True) as st:
        before = st.con.sql(QUERY).fetchall()  # DuckDB's threads have run a query here
        pid = os.fork()
        if pid == 0:  # the child: what a worker does with the parent's copy at its end
            code = 0
            try:
                st.close()
            except BaseException:
                code = 3
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, (
            os.WTERMSIG(status) if os.WIFSIGNALED(status) else status)
        assert st.con.sql(QUERY).fetchall() == before
