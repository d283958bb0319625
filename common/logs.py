"""Structured logs for every topodra component: one JSON object per line on stderr.

JSON lines rather than key=value because values (claim names, error messages) contain spaces
and quotes, and log pipelines parse JSON without a custom grammar. Fields use the same keys
everywhere so one query finds a claim across the runtime, the drivers and the publisher:
`driver`, `claim` (namespace/name), `claim_uid`, `device`, `pool`, `error`.

    log = logs.get(__name__, driver="cpu.topodra.io")
    log.info("claim prepared", **logs.claim(ref), device="cpu-0")
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, Protocol, TextIO

_FIELDS = "topodra_fields"


class _ClaimLike(Protocol):
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...


class JsonFormatter(logging.Formatter):
    _second: tuple[int, str] = (-1, "")  # the last second formatted: most lines share it

    def format(self, record: logging.LogRecord) -> str:
        second = int(record.created)
        known = self._second
        if known[0] != second:
            known = self._second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
        out: dict[str, Any] = {
            "ts": f"{known[1]}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update(getattr(record, _FIELDS, {}))
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, separators=(",", ":"))


def setup(level: int | str = logging.INFO, stream: TextIO | None = None) -> None:
    """Send every log record of the process as JSON lines to `stream` (stderr by default)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # One retry layer, ours (it logs what failed, naming the driver and the object): urllib3's
    # own "Retrying (Retry(total=2...))" warnings would repeat each failure three more times.
    logging.getLogger("urllib3").setLevel(max(logging.ERROR, root.level))


class Logger:
    """A stdlib logger with bound fields; call-site fields win over bound ones."""

    def __init__(self, logger: logging.Logger, fields: dict[str, Any]) -> None:
        self._logger = logger
        self._fields = fields

    def bind(self, **fields: Any) -> Logger:
        return Logger(self._logger, {**self._fields, **fields})

    def log(self, level: int, msg: str, exc_info: bool = False, **fields: Any) -> None:
        """The record is made here, not by `logging.Logger.log`: that one walks the stack to find
        the caller's file and line (`findCaller`), which no formatter of ours prints and which
        cost about a fifth of each line; every claim's prepare and unprepare log lines."""
        logger = self._logger
        if logger.isEnabledFor(level):
            extra = {_FIELDS: {**self._fields, **fields}}
            info = sys.exc_info() if exc_info else None
            logger.handle(logger.makeRecord(logger.name, level, "", 0, msg, (), info, extra=extra))

    def enabled(self, level: int) -> bool:
        """Whether a line at `level` would be written: a hot path asks before it formats a
        message whose text costs more than the check (CPU lists, claim names)."""
        return self._logger.isEnabledFor(level)

    def debug(self, msg: str, **fields: Any) -> None:
        self.log(logging.DEBUG, msg, **fields)

    def info(self, msg: str, **fields: Any) -> None:
        self.log(logging.INFO, msg, **fields)

    def warning(self, msg: str, **fields: Any) -> None:
        self.log(logging.WARNING, msg, **fields)

    def error(self, msg: str, **fields: Any) -> None:
        self.log(logging.ERROR, msg, **fields)

    def exception(self, msg: str, **fields: Any) -> None:
        """Log at error level with the current exception's traceback."""
        self.log(logging.ERROR, msg, exc_info=True, **fields)


def get(name: str, **fields: Any) -> Logger:
    return Logger(logging.getLogger(name), fields)


def claim(ref: _ClaimLike) -> dict[str, str]:
    """The fields that name a claim in every log line about it."""
    return {"claim": f"{ref.namespace}/{ref.name}", "claim_uid": ref.uid}
