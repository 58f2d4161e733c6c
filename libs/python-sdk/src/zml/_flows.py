"""Each exchange with the gateway written once, for both clients, as a generator that does no
I/O itself ("sans-I/O"): a flow yields the I/O it needs next (:class:`Send`, :class:`Read`,
:class:`Close`) and is sent its result, or has the transport's error raised where it yielded.
``ZML`` performs those steps on ``httpx.Client``, ``AsyncZML`` awaits them on
``httpx.AsyncClient``: the protocol cannot differ between the two."""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx

from . import _calls
from ._calls import Call
from ._confidential import (
    SessionChannel,
    SessionPlan,
    allowlist_measurements,
    verify_session,
)
from ._core import (
    LineDecoder,
    error_from_envelope,
    is_error_answer,
    media_type,
    sealed_stream_refusal,
    stream_decoder,
)
from ._errors import AttestationError, ZmlAPIError, ZmlError
from ._models import ChatCompletion
from ._routing import Routing
from ._sealed import ResponseOpener

T = TypeVar("T")
S = TypeVar("S")


@dataclass(frozen=True)
class Send:
    """Send ``call``'s request. Result: the ``httpx.Response``, its body not read yet."""

    call: Call[Any]


@dataclass(frozen=True)
class Read:
    """Read the whole body of ``response``, then close it. Result: the bytes."""

    response: httpx.Response


@dataclass(frozen=True)
class Close:
    """Close ``response`` unread. Result: ``None``."""

    response: httpx.Response


Effect = Send | Read | Close
Flow = Generator[Effect, Any, T]
StreamFactory = Callable[[httpx.Response, Routing, LineDecoder], S]
"""How a client wraps a checked event-stream answer: ``Stream`` or ``AsyncStream``."""


class Stepper(Generic[T]):
    """Walks a flow for a driver (:func:`drive`, ``AsyncZML._drive``): ``effect`` is the I/O
    the flow waits for (``None`` once it has finished); hand it that I/O's result (``send``)
    or error (``throw``), then read ``value``. An error the flow raises comes out of ``send``
    or ``throw``."""

    value: T

    def __init__(self, flow: Flow[T]) -> None:
        self._flow = flow
        self.effect: Effect | None = None
        self._step(lambda: next(flow))

    def send(self, result: Any) -> None:
        self._step(lambda: self._flow.send(result))

    def throw(self, err: Exception) -> None:
        self._step(lambda: self._flow.throw(err))

    def _step(self, advance: Callable[[], Effect]) -> None:
        self.effect = None
        try:
            self.effect = advance()
        except StopIteration as stop:
            self.value = stop.value


def drive(flow: Flow[T], perform: Callable[[Effect], Any]) -> T:
    """Runs ``flow`` to its end, doing each of its steps with ``perform`` (blocking)."""
    stepper = Stepper(flow)
    while (effect := stepper.effect) is not None:
        try:
            result = perform(effect)
        except Exception as err:
            stepper.throw(err)
        else:
            stepper.send(result)
    return stepper.value


def _read(response: httpx.Response) -> Flow[bytes]:
    content: bytes = yield Read(response)
    return content


def _opened(call: Call[Any]) -> Flow[httpx.Response]:
    """The answer to ``call``, its body unread; an error answer raises the typed error."""
    response: httpx.Response = yield Send(call)
    if is_error_answer(response.status_code, response.headers, call.sealed):
        content = yield from _read(response)
        text = content.decode("utf-8", "replace")
        raise error_from_envelope(text, status=response.status_code, headers=response.headers)
    return response


def run(call: Call[T]) -> Flow[T]:
    """A whole answer, read as ``call`` says."""
    response = yield from _opened(call)
    content = yield from _read(response)
    return call.read(response.status_code, response.headers, content)


def answer(
    call: Call[ChatCompletion], opener: ResponseOpener | None, open_stream: StreamFactory[S]
) -> Flow[ChatCompletion | S]:
    """A chat completion, or, for a call that streams, ``open_stream`` over its events once
    the answer's head has been checked. ``opener``: the call is sealed, so is its answer."""
    if not call.streams:
        return (yield from run(call))
    response = yield from _opened(call)
    status, headers = response.status_code, response.headers
    if opener is not None and media_type(headers) != "text/event-stream":
        # The TD seals its server's answer whole when that is an error or not a stream.
        content = yield from _read(response)
        raise sealed_stream_refusal(opener, status, headers, content)
    try:
        routing, decoder = stream_decoder(status, headers, opener)
    except ZmlAPIError:
        yield Close(response)
        raise
    return open_stream(response, routing, decoder)


def open_session(
    plan: SessionPlan, request_id: str | None, wrap: Callable[[SessionChannel], S]
) -> Flow[S]:
    """Opens the session ``plan`` describes and verifies its node before anything is sealed
    to it. A session that cannot be trusted, or not be checked, is deleted before the error
    is raised. Returns ``wrap`` of the verified session's channel."""
    session = yield from run(plan.create)
    try:
        approved = plan.approved_measurements
        if approved is None:
            allowlist = yield from run(_calls.get_allowlist(request_id))
            approved = allowlist_measurements(allowlist, session.node_id)
        verified = verify_session(plan, session, approved)
    except AttestationError as err:
        err.session_id = session.session_id
        err.node_id = err.node_id or session.node_id
        yield from _abandon(session.session_id)
        raise
    except Exception:
        yield from _abandon(session.session_id)
        raise
    return wrap(SessionChannel(verified, plan.suite))


def _abandon(session_id: str) -> Flow[None]:
    """Ends a session the client will not use (best effort: it expires anyway)."""
    try:
        yield from run(_calls.delete_session(session_id, None))
    except ZmlError:
        pass
