"""The one error family of API calls: what a caller needs to decide to retry, give up, or act.

`ApiError.status` is the HTTP status, None when no answer came (unreachable, TLS, timeout): a
caller retries later and drops nothing. `NotFound` is only the API server's own word that the
object named does not exist (see `rest.is_not_found`): a proxy's or load balancer's 404, or the
empty NotFound of a server that does not serve the group, is a plain `ApiError`. `Unusable` is
an answer that came (2xx) but cannot be used: not JSON, nested deeper than the parser follows,
not an object; no retry fixes it.
"""

from __future__ import annotations


class ApiError(Exception):
    def __init__(self, verb: str, status: int | None, reason: str, retry_after: float | None = None) -> None:
        super().__init__(f"{verb}: {status or 'network error'}: {reason}")
        self.verb = verb
        self.status = status
        self.reason = reason
        self.retry_after = retry_after

    @property
    def code(self) -> str:
        """Metric label: the HTTP status, or "network"."""
        return str(self.status) if self.status is not None else "network"


class NotFound(ApiError):
    """The API server says the object named does not exist."""


class Conflict(ApiError):
    """409: someone wrote the object in between (or it exists already); read again."""


class Unusable(ApiError):
    """The API answered with a body that cannot be used."""
