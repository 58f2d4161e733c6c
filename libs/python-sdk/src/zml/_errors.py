"""Typed errors. Every API error carries the HTTP status, the gateway's machine-readable
``code`` (``unknown_model``, ``tier_not_allowed``, ``rate_limited``, ``saturated``, …) and
``param``, the offending field."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._routing import Routing

if TYPE_CHECKING:
    from ._attest import AttestationResult


class ZmlError(Exception):
    """Base class of every error this SDK raises."""


class APIConnectionError(ZmlError):
    """The gateway could not be reached, or the connection broke before an answer."""

    code = "connection_error"


class APITimeoutError(APIConnectionError):
    """No answer (or no next stream chunk) within the client's timeout."""

    code = "timeout"


class ZmlAPIError(ZmlError):
    """An error answer from the ZML API."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        code: str,
        param: str | None = None,
        request_id: str | None = None,
        routing: Routing | None = None,
        retry_after: float | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        """HTTP status (a stream that failed after it began reports 502)."""
        self.code = code
        """The API's error code; an upstream error without one is ``http_<status>``."""
        self.param = param
        """The offending request field, e.g. ``tier`` or ``messages.0.role``."""
        self.request_id = request_id
        self.routing = routing
        """The routing decision, when the failure came after one was made."""
        self.retry_after = retry_after
        """Seconds to wait before retrying (``Retry-After``), when the gateway said."""
        self.body = body

    def __str__(self) -> str:
        where = f" ({self.param})" if self.param else ""
        return f"{self.status} {self.code}{where}: {self.message}"


class BadRequestError(ZmlAPIError):
    """400: the request is malformed or names an unknown policy."""


class AuthenticationError(ZmlAPIError):
    """401: missing or invalid API key."""


class PermissionDeniedError(ZmlAPIError):
    """403: e.g. ``tier_not_allowed``: the account may not use that tier."""


class NotFoundError(ZmlAPIError):
    """404: unknown model, job or session."""


class SessionExpiredError(ZmlAPIError):
    """410: the tier-4 session has expired; open a new one."""


class RateLimitError(ZmlAPIError):
    """429: the account's request rate is exceeded; wait ``retry_after`` seconds."""


class InternalServerError(ZmlAPIError):
    """5xx other than 503: the gateway or the node failed."""


class ServiceUnavailableError(ZmlAPIError):
    """503: no node can take the request now (``saturated``, ``no_node_available``) or the
    tier-4 session's node is gone (``session_node_unavailable``)."""


class StreamError(ZmlAPIError):
    """A stream ended with an ``event: error`` or without its ``[DONE]`` marker: the answer
    is incomplete and must not be taken for a whole one."""


class SealedResponseError(ZmlAPIError):
    """A tier-4 answer that is not sealed to this request, or does not open: a chunk that
    fails to open (altered, reordered, dropped, or another request's answer), a chunk after
    the final one, a stream cut before its final chunk, a missing or short response nonce, or
    an unsealed success. Code ``sealed_response_invalid``. Never retried: it may mean the
    gateway tampered with the answer."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 502,
        request_id: str | None = None,
        routing: Routing | None = None,
    ) -> None:
        super().__init__(
            message,
            status=status,
            code="sealed_response_invalid",
            request_id=request_id,
            routing=routing,
        )


class AttestationError(ZmlError):
    """A tier-4 session's node could not be trusted: its quote, measurement or binding did
    not verify (``sessions.create`` refuses the session and seals nothing to its key).
    ``check`` names the first failed check (``pck_chain``, ``quote_signature``,
    ``td_debug``, ``measurements``, ``report_data``, ``nonce``, …); ``result`` has them all."""

    code = "attestation_failed"

    def __init__(
        self,
        message: str,
        *,
        check: str | None = None,
        result: AttestationResult | None = None,
        session_id: str | None = None,
        node_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.check = check
        self.result = result
        self.session_id = session_id
        self.node_id = node_id

    def __str__(self) -> str:
        where = f" (node {self.node_id})" if self.node_id else ""
        return f"attestation failed{where}: {self.message}"


_BY_STATUS: dict[int, type[ZmlAPIError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    410: SessionExpiredError,
    429: RateLimitError,
    503: ServiceUnavailableError,
}


def error_class(status: int) -> type[ZmlAPIError]:
    """The most specific error class for an HTTP status."""
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return InternalServerError if status >= 500 else ZmlAPIError
