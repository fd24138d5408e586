"""runstream's log records kept in the span store, with the run and trace they belong to.

A :class:`LogKeeper` puts a queue handler on the ``runstream`` logger: a record costs the
logging thread one ``put`` (a full queue drops it); a listener thread turns records into Mastra's
log records and writes them. A record logged with ``extra={"runId": ...}`` (the loop and tool
step do so) gets the run's trace, resource and thread from the span processor feeding the store;
one with ``traceId``/``resourceId``/``scorerId`` (a scorer's failure) is kept under those.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import uuid
from datetime import UTC, datetime
from logging.handlers import QueueHandler, QueueListener

from runstream.observability.records import LogRecord
from runstream.observability.store import SpanStore, iso

_LEVELS = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warn", logging.ERROR: "error"}


_ABOUT = ("traceId", "resourceId", "scorerId")
"""What a record not about a run may say it is about (``extra=``): a scorer's failure on a trace."""


def level_name(levelno: int) -> str:
    if levelno >= logging.CRITICAL:
        return "fatal"
    return _LEVELS.get(levelno - levelno % 10, "debug")


class _DroppingQueueHandler(QueueHandler):
    def enqueue(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(queue.Full):  # a flood of logs must not block or break the code that logs
            self.queue.put_nowait(record)


class _StoreWriter(logging.Handler):
    def __init__(self, store: SpanStore) -> None:
        super().__init__()
        self.store = store

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.store.write_logs([log_record(record, self.store)])
        except Exception:
            self.handleError(record)


def log_record(record: logging.LogRecord, store: SpanStore) -> LogRecord:
    """A logging record as Mastra's log record (``message`` already formatted by the queue handler)."""
    run_id = getattr(record, "runId", None)
    run_id = run_id if isinstance(run_id, str) else None
    context = store.run_context(run_id) if run_id is not None and store.run_context is not None else {}
    trace_id, resource_id, scorer_id = (getattr(record, key, None) for key in _ABOUT)
    data = {"logger": record.name, **({"scorerId": scorer_id} if isinstance(scorer_id, str) else {})}
    return {
        "logId": str(uuid.uuid4()),
        "timestamp": iso(datetime.fromtimestamp(record.created, UTC)),
        "level": level_name(record.levelno),
        "message": record.getMessage(),
        "data": data,
        "traceId": context.get("traceId") or (trace_id if isinstance(trace_id, str) else None),
        "spanId": context.get("spanId"),
        "runId": run_id,
        "resourceId": context.get("resourceId") or (resource_id if isinstance(resource_id, str) else None),
        "threadId": context.get("threadId"),
        "entityType": "agent" if context.get("entityId") else None,
        "entityId": context.get("entityId"),
        "entityName": context.get("entityName"),
        "serviceName": None,
        "environment": None,
        "source": None,
        "metadata": None,
    }


class LogKeeper:
    """Keeps the ``logger`` records at ``level`` and above in ``store`` until :meth:`stop` (the
    logger's own level still applies: ``WARNING`` unless the application sets it)."""

    def __init__(self, store: SpanStore, *, logger: str = "runstream", level: int = logging.DEBUG) -> None:
        self._logger = logging.getLogger(logger)
        self._queue: queue.Queue[logging.LogRecord] = queue.Queue(maxsize=10_000)
        self._handler = _DroppingQueueHandler(self._queue)
        self._handler.setLevel(level)
        self._listener = QueueListener(self._queue, _StoreWriter(store))
        self._listener.start()
        self._logger.addHandler(self._handler)

    def flush(self) -> None:
        """Wait until every record queued so far is written."""
        self._queue.join()

    def stop(self) -> None:
        """Detach and write what is queued."""
        self._logger.removeHandler(self._handler)
        self._listener.stop()
