"""The wire protocol, free of I/O: request bodies, answer interpretation, stream decoding.
The exchanges built from them (``_flows.py``) are shared by the sync and async clients."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ._errors import SealedResponseError, StreamError, ZmlAPIError, error_class
from ._models import ChatCompletion, ChatCompletionChunk
from ._routing import ROUTING_HEADER, Routing, RoutingHeaderError, parse_routing_header
from ._sealed import (
    SEALED_RESPONSE_MEDIA_TYPE,
    GatewayError,
    ResponseOpener,
    SealedStreamReader,
    StreamEnd,
    StreamEvent,
    StreamHead,
)

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


def request_parts(
    api_key: str,
    request_id: str | None,
    body: Mapping[str, Any] | None,
    content: bytes | None = None,
    content_type: str | None = None,
) -> dict[str, Any]:
    """``headers`` and the body (``json``, or raw ``content`` of ``content_type``, as a
    sealed envelope is sent) for ``httpx``'s ``build_request``."""
    headers = request_headers(api_key, request_id)
    if content is None:
        return {"headers": headers, "json": body}
    if content_type is not None:
        headers["content-type"] = content_type
    return {"headers": headers, "content": content}


def is_error_answer(status: int, headers: Headers, sealed: bool) -> bool:
    """An answer to raise as the usual API error at once: an error status, unless it is a
    sealed answer to a sealed request (the TD's server's status is also inside; the client
    reads that one)."""
    return status >= 400 and not (sealed and is_sealed_answer(headers))


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


def _check_event_stream(status: int, headers: Headers) -> None:
    if not headers.get("content-type", "").startswith("text/event-stream"):
        raise ZmlAPIError(
            "expected an event stream",
            status=status,
            code="invalid_response",
            request_id=headers.get("x-request-id"),
            routing=_routing(headers),
        )


class LineDecoder(Protocol):
    """What a stream reads its lines with: :class:`StreamDecoder`, or
    :class:`SealedStreamDecoder` for a tier-4 session's sealed stream."""

    done: bool

    def feed_all(self, line: str) -> list[ChatCompletionChunk]: ...

    def finish(self) -> None: ...

    def broken(self, err: Exception) -> StreamError: ...


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

    def feed_all(self, line: str) -> list[ChatCompletionChunk]:
        chunk = self.feed(line)
        return [] if chunk is None else [chunk]

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


def stream_decoder(
    status: int, headers: Headers, opener: ResponseOpener | None
) -> tuple[Routing, LineDecoder]:
    """The routing and the decoder of a successful answer to a streamed request; ``opener``:
    the request was sealed, so the events are. Raises for an answer without routing, or (in
    clear) one that is not an event stream."""
    routing = routing_of(status, headers)
    if opener is not None:
        return routing, SealedStreamDecoder(opener, headers, routing)
    _check_event_stream(status, headers)
    return routing, StreamDecoder(headers, routing)


# --- Tier 4: sealed answers (docs/sealed-channel.md) ----------------------------------------


def media_type(headers: Headers) -> str:
    return headers.get("content-type", "").split(";")[0].strip().lower()


def is_sealed_answer(headers: Headers) -> bool:
    """A whole sealed answer (``application/vnd.zml.sealed-response+json``)."""
    return media_type(headers) == SEALED_RESPONSE_MEDIA_TYPE


def _sealed_error(
    err: SealedResponseError, status: int, headers: Headers, routing: Routing | None
) -> SealedResponseError:
    err.status = status
    err.request_id = headers.get("x-request-id")
    err.routing = routing if routing is not None else _routing(headers)
    return err


def _unsealed(status: int, headers: Headers, content: bytes) -> ZmlAPIError:
    """An answer in clear: only an error may be (the gateway's own, in the usual envelope)."""
    if status >= 400:
        return error_from_envelope(
            content.decode("utf-8", "replace"), status=status, headers=headers
        )
    return _sealed_error(
        SealedResponseError(
            f"a {status} answer in clear ({media_type(headers) or 'no content type'}) to a "
            "sealed request: refused, only errors may come unsealed"
        ),
        status,
        headers,
        None,
    )


def sealed_completion(
    opener: ResponseOpener, status: int, headers: Headers, content: bytes
) -> ChatCompletion:
    """Reads the answer to a sealed, non-streamed request: opened, the TD's server's status
    taken from its head (an error status raises the usual API error with the opened body),
    the body a chat completion. Raises :class:`SealedResponseError` for an answer that is
    not sealed to this request or does not open."""
    if not is_sealed_answer(headers):
        raise _unsealed(status, headers, content)
    try:
        opened = opener.open_answer(content)
    except SealedResponseError as err:
        raise _sealed_error(err, status, headers, None) from None
    if opened.status >= 400:
        raise error_from_envelope(
            opened.body.decode("utf-8", "replace"), status=opened.status, headers=headers
        )
    routing = routing_of(status, headers)
    try:
        body = json.loads(opened.body)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise ZmlAPIError(
            "the opened answer is not a JSON object",
            status=opened.status,
            code="invalid_response",
            request_id=headers.get("x-request-id"),
            routing=routing,
        )
    return ChatCompletion.from_json(body, routing, headers.get("x-request-id"))


def sealed_stream_refusal(
    opener: ResponseOpener, status: int, headers: Headers, content: bytes
) -> ZmlAPIError:
    """The error for a whole (not event-stream) answer to a sealed streamed request: the TD
    seals its server's answer whole when that is an error or not a stream."""
    if not is_sealed_answer(headers):
        return _unsealed(status, headers, content)
    try:
        opened = opener.open_answer(content)
    except SealedResponseError as err:
        return _sealed_error(err, status, headers, None)
    if opened.status >= 400:
        return error_from_envelope(
            opened.body.decode("utf-8", "replace"), status=opened.status, headers=headers
        )
    return ZmlAPIError(
        f"expected an event stream, the node answered {opened.content_type or 'no content type'}",
        status=opened.status,
        code="invalid_response",
        request_id=headers.get("x-request-id"),
        routing=_routing(headers),
    )


class SealedStreamDecoder:
    """The sealed counterpart of :class:`StreamDecoder`: opens each event of a sealed stream
    (:class:`zml._sealed.SealedStreamReader`) and decodes the server's events inside. ``done``
    only at the chunk sealed as final, and only after the server's own ``[DONE]``; an
    ``event: error`` from the gateway raises :class:`StreamError`; anything that does not
    open, or a stream cut before its final chunk, raises :class:`SealedResponseError`."""

    def __init__(self, opener: ResponseOpener, headers: Headers, routing: Routing) -> None:
        self._headers = headers
        self._routing = routing
        self._reader: SealedStreamReader = opener.stream_reader()
        self._inner = StreamDecoder(headers, routing)
        self._error_status: int | None = None
        self._error_body: list[bytes] = []
        self.done = False

    def _fail(self, err: SealedResponseError) -> SealedResponseError:
        return _sealed_error(err, 502, self._headers, self._routing)

    def feed_all(self, line: str) -> list[ChatCompletionChunk]:
        try:
            part = self._reader.feed_line(line)
        except SealedResponseError as err:
            raise self._fail(err) from None
        if part is None:
            return []
        if isinstance(part, GatewayError):
            raise error_from_envelope(part.data, status=502, headers=self._headers, cls=StreamError)
        if isinstance(part, StreamHead):
            head = part.head
            if head.status >= 400:
                self._error_status = head.status
            elif not head.content_type.lower().startswith("text/event-stream"):
                raise ZmlAPIError(
                    f"expected an event stream, the node answered {head.content_type}",
                    status=head.status,
                    code="invalid_response",
                    request_id=self._headers.get("x-request-id"),
                    routing=self._routing,
                )
            return []
        if isinstance(part, StreamEvent):
            if self._error_status is not None:
                self._error_body.append(part.data)
                return []
            chunks: list[ChatCompletionChunk] = []
            for inner_line in part.data.decode("utf-8", "replace").splitlines():
                chunks += self._inner.feed_all(inner_line)
            # An event is complete in its chunk: end it even without its blank line.
            chunks += self._inner.feed_all("")
            return chunks
        assert isinstance(part, StreamEnd)
        if self._error_status is not None:
            text = b"".join(self._error_body).decode("utf-8", "replace")
            raise error_from_envelope(text, status=self._error_status, headers=self._headers)
        self._inner.finish()  # the server's stream must have ended with [DONE]
        self.done = True
        return []

    def finish(self) -> None:
        try:
            self._reader.finish()
        except SealedResponseError as err:
            raise self._fail(err) from None
        self._inner.finish()

    def broken(self, err: Exception) -> StreamError:
        return self._inner.broken(err)
