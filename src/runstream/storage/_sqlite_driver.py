"""The one SQLite library of the process, for the storage and the vector store alike.

``sqlite-vec`` is a loadable extension, and the interpreter's ``sqlite3`` is often built
without extension loading (pyenv, some distributions); the ``sqlean.py`` package is a
``sqlite3`` with it. Both stores then use ``sqlean``: two copies of SQLite in one process must
never open the same file (SQLite's POSIX locks are per process and each copy keeps its own
record of them, so one copy closing the file drops the other's locks; the SQLite docs warn of
the corruption this causes, and a second copy reading the first one's WAL file reports "file is
not a database").
"""

from __future__ import annotations

import sqlite3
import threading
import weakref
from collections.abc import Callable
from functools import cache
from typing import Any

import aiosqlite


@cache
def module() -> Any:
    """``sqlite3`` if it can load extensions, else ``sqlean`` when installed, else ``sqlite3``."""
    probe = sqlite3.connect(":memory:")
    try:
        if hasattr(probe, "enable_load_extension"):
            return sqlite3
    finally:
        probe.close()
    try:
        import sqlean  # type: ignore[import-untyped]
    except ImportError:
        return sqlite3
    return sqlean


def errors() -> tuple[type[Exception], ...]:
    """The ``Error`` classes the library raises (with ``sqlite3.Error``)."""
    return tuple({sqlite3.Error, module().Error})


def operational_errors() -> tuple[type[Exception], ...]:
    return tuple({sqlite3.OperationalError, module().OperationalError})


def connect(path: str, *, setup: Callable[[Any], None] | None = None) -> aiosqlite.Connection:
    """An ``aiosqlite`` connection (autocommit) on the chosen library; ``setup`` runs on the raw
    connection in aiosqlite's thread (loading an extension)."""
    chosen = module()

    def connector() -> Any:
        db = chosen.connect(path, isolation_level=None, check_same_thread=False)
        if setup is not None:
            setup(db)
        return db

    connection = aiosqlite.Connection(connector, 64)
    _stop_at_exit(connection)
    return connection


def _stop_at_exit(db: aiosqlite.Connection) -> None:
    """Let the interpreter exit although the connection was never closed.

    aiosqlite runs each connection in a (non-daemon) thread that only ``close()`` ends, and the
    interpreter waits for such threads before it exits: a storage used without
    ``async with Runstream(...)`` or ``await storage.close()`` (``Memory(storage=SqliteStorage(...))``
    in a script) hung the process at exit. This stops the thread (closing the SQLite connection
    in it: every transaction was committed already) from the hook the interpreter runs just
    before it waits for threads, the one ``concurrent.futures`` uses for its workers.
    """
    ref = weakref.ref(db)

    def stop() -> None:
        conn = ref()
        if conn is not None:  # (a closed one's thread has ended: the request goes unread)
            conn.stop()

    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        register(stop)
