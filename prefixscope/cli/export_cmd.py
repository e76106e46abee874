"""`prefixscope export`: write the store's tables as Parquet for other tools."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from prefixscope.cli import console
from prefixscope.cli.options import Quiet, StoreOpt

TABLES = ("requests", "bodies", "sessions", "turns")


def register(app: typer.Typer) -> None:
    app.command("export")(export)


def export(
    parquet: Annotated[Path, typer.Option("--parquet", help="Directory to write "
                                                            "<table>.parquet files into.")],
    store: StoreOpt = None,
    quiet: Quiet = 0,
) -> None:
    """Export requests, bodies, sessions and the turns view as Parquet files.

    Example:
        prefixscope export --parquet out/ && duckdb -c "from 'out/turns.parquet'"
    """
    import duckdb

    from prefixscope.cli.exitcodes import ExitCode
    from prefixscope.store import DEFAULT_STORE, Store, StoreError

    if parquet.exists() and not parquet.is_dir():
        raise console.fail(f"--parquet {parquet} is a file: give a directory (export writes "
                           f"{', '.join(t + '.parquet' for t in TABLES)} into it)",
                           ExitCode.USAGE)
    try:
        st = Store.open(store or DEFAULT_STORE, read_only=True)
    except StoreError as exc:
        raise console.fail(str(exc)) from None
    try:
        try:
            parquet.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise console.fail(f"cannot create directory {parquet}: "
                               f"{exc.strerror or exc}") from None
        for table in TABLES:
            target = parquet / f"{table}.parquet"
            st.con.execute(f"COPY (SELECT * FROM {table}) TO '{_quote(target)}' "
                           "(FORMAT PARQUET, COMPRESSION ZSTD)")
            console.note(f"wrote {target}", quiet)
    except OSError as exc:
        raise console.fail(f"export failed: {exc.strerror or exc}") from None
    except duckdb.Error as exc:
        raise console.fail(f"export failed: {str(exc).splitlines()[0]}") from None
    finally:
        st.close()


def _quote(path: Path) -> str:
    return str(path).replace("'", "''")
