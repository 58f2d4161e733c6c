"""The wire protocol, free of I/O: request bodies, answer interpretation, stream decoding.
The sync and async clients are thin loops around these functions."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ._errors import StreamError, ZmlAPIError, error_class
from ._models import ChatCompletion, ChatCompletionChunk
from ._routing import ROUTING_HEADER, Routing, RoutingHeaderError, parse_routing_header

Headers = Mapping[str, str]
Messages = Sequence[Mapping[str, Any]]


def api_root(base_url: str) -> str:
    """``https://zml.example.com``, with or without a trailing ``/`` or ``/v1``."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def request_headers(api_key: str, request_id: str | None) -> dict[str, str]:
    headers = {"authorization": f"Bearer {api_key}", "user-agent": "zml-python/0.1.0"}
    if request_id is not None:
        headers["x-request-id"] = request_id
    return headers


def body_of(fields: Mapping[str, Any], extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """A request body: the given fields minus unset ones, then any extra parameters."""
    body = {k: v for k, v in fields.items() if v is not None}
    body.update(extra or {})
    return body


def _routing(headers: Headers) -> Routing | None:
    raw = headers.get(ROUTING_HEADER)
    if raw is None:
        return None
    try:
        return parse_routing_header(raw)
    except RoutingHeaderError:
        return None


def _retry_after(headers: Headers) -> float | None:
    try:
        seconds = float(headers.get("retry-after", ""))
    except ValueError:
        return None
    return seconds if seconds > 0 else None


def error_from_envelope(
    text: str,
    *,
    status: int,
    headers: Headers,
    cls: type[ZmlAPIError] | None = None,
) -> ZmlAPIError:
    """Builds the typed error from an OpenAI-style ``{"error": {...}}`` body (or any text)."""
    body: Any = None
    error: dict[str, Any] = {}
    try:
        body = json.loads(text)
        if isinstance(body, dict):
            inner = body.get("error", body)
            error = inner if isinstance(inner, dict) else {}
    except ValueError:
        pass
    code = error.get("code")
    message = error.get("message")
    param = error.get("param")
    return (cls or error_class(status))(
        message if isinstance(message, str) else (text or f"HTTP {status}"),
        status=status,
        code=code if isinstance(code, str) else f"http_{status}",
        param=param if isinstance(param, str) else None,
        request_id=headers.get("x-request-id"),
        routing=_routing(headers),
        retry_after=_retry_after(headers),
        body=body if body is not None else text,
    )


def routing_of(status: int, headers: Headers) -> Routing:
    """The routing decision of a successful answer; an answer without one is refused."""
    raw = headers.get(ROUTING_HEADER)
    try:
        if raw is None:
            raise RoutingHeaderError("missing")
        return parse_routing_header(raw)
    except RoutingHeaderError as err:
        raise ZmlAPIError(
            f"answer without a valid {ROUTING_HEADER} header: {err}",
            status=status,
            code="invalid_response",
            request_id=headers.get("x-request-id"),
        ) from err


def parse_json(status: int, headers: Headers, content: bytes) -> Any:
    try:
        return json.loads(content)
    except ValueError as err:
        raise ZmlAPIError(
            "answer body is not JSON",
            status=status,
            code="invalid_response",
            request_id=headers.get("x-request-id"),
        ) from err


def completion_of(status: int, headers: Headers, content: bytes) -> ChatCompletion:
    routing = routing_of(status, headers)
    body = parse_json(status, headers, content)
    if not isinstance(body, dict):
        raise ZmlAPIError(
            "answer body is not a JSON object", status=status, code="invalid_response"
        )
    return ChatCompletion.from_json(body, routing, headers.get("x-request-id"))


def check_event_stream(status: int, headers: Headers) -> None:
    if not headers.get("content-type", "").startswith("text/event-stream"):
        raise ZmlAPIError(
            "expected an event stream",
            status=status,
            code="invalid_response",
            request_id=headers.get("x-request-id"),
            routing=_routing(headers),
        )


class StreamDecoder:
    """Turns the lines of a server-sent event stream into chunks.

    ``feed`` returns a chunk when a line completes one; it raises :class:`StreamError` on an
    ``event: error``. ``finish`` raises when the stream ended without ``[DONE]``: a
    truncated answer is never reported as a complete one.
    """

    def __init__(self, headers: Headers, routing: Routing) -> None:
        self._headers = headers
        self._routing = routing
        self._event = ""
        self._data: list[str] = []
        self.done = False

    def _interrupted(self, message: str) -> StreamError:
        return StreamError(
            message,
            status=502,
            code="stream_interrupted",
            request_id=self._headers.get("x-request-id"),
            routing=self._routing,
        )

    def feed(self, line: str) -> ChatCompletionChunk | None:
        line = line.rstrip("\r\n")
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None

    def _dispatch(self) -> ChatCompletionChunk | None:
        event, data = self._event or "message", "\n".join(self._data)
        self._event, self._data = "", []
        if not data or self.done:
            return None
        if event == "error":
            raise error_from_envelope(data, status=502, headers=self._headers, cls=StreamError)
        if data == "[DONE]":
            self.done = True
            return None
        try:
            chunk = json.loads(data)
        except ValueError as err:
            raise self._interrupted("stream sent a chunk that is not JSON") from err
        return ChatCompletionChunk.from_json(chunk if isinstance(chunk, dict) else {})

    def finish(self) -> None:
        if not self.done:
            raise self._interrupted("stream ended before [DONE]")

    def broken(self, err: Exception) -> StreamError:
        return self._interrupted(f"stream broke: {err}")
