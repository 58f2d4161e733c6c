"""The synchronous client, :class:`ZML`."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, TypeVar, overload

import httpx

from . import _calls, _confidential
from ._calls import Call
from ._confidential import SessionChannel, SessionView
from ._core import (
    LineDecoder,
    Messages,
    SealedStreamDecoder,
    StreamDecoder,
    api_root,
    check_event_stream,
    error_from_envelope,
    is_error_answer,
    media_type,
    request_parts,
    routing_of,
    sealed_stream_refusal,
)
from ._errors import APIConnectionError, APITimeoutError, AttestationError, ZmlAPIError, ZmlError
from ._models import ChatCompletion, ChatCompletionChunk, Job, JobReceipt, Model
from ._routing import Routing
from ._sealed import DEFAULT_SUITE, ResponseOpener

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 60.0


def settings(base_url: str | None, api_key: str | None) -> tuple[str, str]:
    """The API root and key, from the arguments or ``ZML_BASE_URL`` / ``ZML_API_KEY``."""
    url = base_url or os.environ.get("ZML_BASE_URL")
    key = api_key or os.environ.get("ZML_API_KEY")
    if not url:
        raise ZmlError("base_url is required (or set ZML_BASE_URL)")
    if not key:
        raise ZmlError("api_key is required (or set ZML_API_KEY)")
    return api_root(url), key


def transport_error(err: httpx.HTTPError, root: str) -> APIConnectionError:
    if isinstance(err, httpx.TimeoutException):
        return APITimeoutError(f"no answer from {root} in time: {err}")
    return APIConnectionError(f"cannot reach {root}: {err}")


class Stream(Iterator[ChatCompletionChunk]):
    """A streamed answer: iterate it for the chunks. ``routing`` is known before the first
    chunk. Iteration raises :class:`StreamError` when the stream ends with an error event
    or without ``[DONE]``. Close it (or use ``with``) to stop early."""

    def __init__(
        self,
        response: httpx.Response,
        routing: Routing,
        decoder: LineDecoder | None = None,
    ) -> None:
        self.routing = routing
        self.request_id: str | None = response.headers.get("x-request-id")
        self._response = response
        self._chunks = self._read(decoder or StreamDecoder(response.headers, routing))

    def _read(self, decoder: LineDecoder) -> Iterator[ChatCompletionChunk]:
        try:
            for line in self._response.iter_lines():
                yield from decoder.feed_all(line)
                if decoder.done:
                    return
            decoder.finish()
        except httpx.HTTPError as err:
            raise decoder.broken(err) from err
        finally:
            self._response.close()

    def __next__(self) -> ChatCompletionChunk:
        return next(self._chunks)

    def close(self) -> None:
        self._response.close()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ZML:
    """Client for the ZML API.

    >>> client = ZML(base_url="http://127.0.0.1:8080", api_key="...")
    >>> response = client.infer(model="llama-3.1-8b-instruct", messages=[...])
    >>> response.routing.node
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        http_client: httpx.Client | None = None,
    ) -> None:
        self.base_url, self._api_key = settings(base_url, api_key)
        self._http = http_client or httpx.Client(timeout=timeout)
        self.chat = Chat(self)
        self.models = Models(self)
        self.jobs = Jobs(self)
        self.sessions = Sessions(self)

    def _open(self, call: Call[Any]) -> httpx.Response:
        request = self._http.build_request(
            call.method,
            f"{self.base_url}{call.path}",
            **request_parts(
                self._api_key, call.request_id, call.body, call.content, call.content_type
            ),
        )
        try:
            response = self._http.send(request, stream=True)
        except httpx.HTTPError as err:
            raise transport_error(err, self.base_url) from err
        if is_error_answer(response.status_code, response.headers, call.sealed):
            text = self._read(response).decode("utf-8", "replace")
            raise error_from_envelope(text, status=response.status_code, headers=response.headers)
        return response

    def _read(self, response: httpx.Response) -> bytes:
        try:
            return response.read()
        except httpx.HTTPError as err:
            raise transport_error(err, self.base_url) from err
        finally:
            response.close()

    def _run(self, call: Call[T]) -> T:
        response = self._open(call)
        return call.read(response.status_code, response.headers, self._read(response))

    def _answer(self, call: Call[ChatCompletion]) -> ChatCompletion | Stream:
        if not call.streams:
            return self._run(call)
        response = self._open(call)
        try:
            routing = routing_of(response.status_code, response.headers)
            check_event_stream(response.status_code, response.headers)
        except ZmlAPIError:
            response.close()
            raise
        return Stream(response, routing)

    def _sealed_answer(
        self, call: Call[ChatCompletion], opener: ResponseOpener
    ) -> ChatCompletion | Stream:
        if not call.streams:
            return self._run(call)
        response = self._open(call)
        if media_type(response.headers) != "text/event-stream":
            content = self._read(response)
            raise sealed_stream_refusal(opener, response.status_code, response.headers, content)
        try:
            routing = routing_of(response.status_code, response.headers)
        except ZmlAPIError:
            response.close()
            raise
        return Stream(response, routing, SealedStreamDecoder(opener, response.headers, routing))

    @overload
    def infer(
        self,
        *,
        model: str,
        messages: Messages,
        stream: Literal[False] = False,
        policy: str | None = None,
        accelerator_hint: str | None = None,
        tier: int | None = None,
        fallback_models: Sequence[str] | None = None,
        sort: Literal["quality", "price", "latency"] | None = None,
        session_id: str | None = None,
        request_id: str | None = None,
        **params: Any,
    ) -> ChatCompletion: ...
    @overload
    def infer(
        self,
        *,
        model: str,
        messages: Messages,
        stream: Literal[True],
        policy: str | None = None,
        accelerator_hint: str | None = None,
        tier: int | None = None,
        fallback_models: Sequence[str] | None = None,
        sort: Literal["quality", "price", "latency"] | None = None,
        session_id: str | None = None,
        request_id: str | None = None,
        **params: Any,
    ) -> Stream: ...
    def infer(
        self,
        *,
        model: str,
        messages: Messages,
        stream: bool = False,
        policy: str | None = None,
        accelerator_hint: str | None = None,
        tier: int | None = None,
        fallback_models: Sequence[str] | None = None,
        sort: Literal["quality", "price", "latency"] | None = None,
        session_id: str | None = None,
        request_id: str | None = None,
        **params: Any,
    ) -> ChatCompletion | Stream:
        """ZML's native call (``POST /v1/infer``): strict, so a misspelt field is an error.
        ``params`` are generation parameters (``max_tokens``, ``temperature``, ``top_p``,
        ``stop``, ``seed``)."""
        return self._answer(
            _calls.infer(
                model=model,
                messages=messages,
                stream=stream,
                policy=policy,
                accelerator_hint=accelerator_hint,
                tier=tier,
                fallback_models=fallback_models,
                sort=sort,
                session_id=session_id,
                request_id=request_id,
                params=params,
            )
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ZML:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Completions:
    def __init__(self, client: ZML) -> None:
        self._client = client

    @overload
    def create(
        self,
        *,
        model: str,
        messages: Messages,
        stream: Literal[False] = False,
        policy: str | None = None,
        accelerator_hint: str | None = None,
        tier: int | None = None,
        models: Sequence[str] | None = None,
        provider: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        request_id: str | None = None,
        **params: Any,
    ) -> ChatCompletion: ...
    @overload
    def create(
        self,
        *,
        model: str,
        messages: Messages,
        stream: Literal[True],
        policy: str | None = None,
        accelerator_hint: str | None = None,
        tier: int | None = None,
        models: Sequence[str] | None = None,
        provider: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        request_id: str | None = None,
        **params: Any,
    ) -> Stream: ...
    def create(
        self,
        *,
        model: str,
        messages: Messages,
        stream: bool = False,
        policy: str | None = None,
        accelerator_hint: str | None = None,
        tier: int | None = None,
        models: Sequence[str] | None = None,
        provider: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        request_id: str | None = None,
        **params: Any,
    ) -> ChatCompletion | Stream:
        """The OpenAI-compatible call (``POST /v1/chat/completions``) with ZML's routing
        fields alongside: ``models`` is the fallback chain, ``provider={"sort": "quality"}``
        opts into quality routing. Other OpenAI parameters go in ``params`` unchanged."""
        return self._client._answer(
            _calls.chat(
                model=model,
                messages=messages,
                stream=stream,
                policy=policy,
                accelerator_hint=accelerator_hint,
                tier=tier,
                models=models,
                provider=provider,
                session_id=session_id,
                request_id=request_id,
                params=params,
            )
        )


class Chat:
    def __init__(self, client: ZML) -> None:
        self.completions = Completions(client)


class Models:
    def __init__(self, client: ZML) -> None:
        self._client = client

    def list(self, *, request_id: str | None = None) -> list[Model]:
        """The models the fleet serves (``GET /v1/models``)."""
        return self._client._run(_calls.list_models(request_id))


class Jobs:
    """Batch jobs (``/v1/jobs``), queued on JetStream and run as capacity allows."""

    def __init__(self, client: ZML) -> None:
        self._client = client

    def submit(
        self,
        *,
        model: str,
        messages: Messages,
        job_id: str | None = None,
        request_id: str | None = None,
        **params: Any,
    ) -> JobReceipt:
        """Queues one chat completion as a job. ``job_id`` (letters, digits, ``-``, ``_``;
        at most 64) is the dedupe key; ``params`` are ZML and OpenAI fields."""
        return self._client._run(
            _calls.submit_job(
                model=model, messages=messages, job_id=job_id, request_id=request_id, params=params
            )
        )

    def get(self, job_id: str, *, request_id: str | None = None) -> Job:
        return self._client._run(_calls.get_job(job_id, request_id))

    def results(
        self,
        job_ids: Iterable[str],
        *,
        poll_interval: float = 0.5,
        timeout: float | None = None,
    ) -> Iterator[Job]:
        """Yields each job once it has finished (done, failed or expired), in the order
        they finish. Raises :class:`APITimeoutError` if ``timeout`` seconds pass first."""
        pending = list(dict.fromkeys(job_ids))
        deadline = None if timeout is None else time.monotonic() + timeout
        while pending:
            for job_id in list(pending):
                job = self.get(job_id)
                if job.finished:
                    pending.remove(job_id)
                    yield job
            if pending:
                if deadline is not None and time.monotonic() + poll_interval > deadline:
                    raise APITimeoutError(f"jobs not finished in {timeout} s: {pending}")
                time.sleep(poll_interval)


class Sessions:
    """Tier-4 sessions: requests sealed to one attested node's key for the session's life."""

    def __init__(self, client: ZML) -> None:
        self._client = client

    def create(
        self,
        model: str,
        *,
        approved_measurements: Sequence[Mapping[str, Any]] | None = None,
        trusted_root_pem: str | None = None,
        policy: str | None = None,
        ttl_s: int | None = None,
        suite: str = DEFAULT_SUITE,
        request_id: str | None = None,
    ) -> ConfidentialSession:
        """Opens a confidential session on a freshly attested tier-4 node and verifies it
        before anything is sealed to it: the client draws a 32-byte nonce, the node's TDX quote
        must chain to ``trusted_root_pem`` (default: Intel's SGX root CA) with valid QE and
        quote signatures, not be a debug TD, show an approved measurement and bind in
        REPORTDATA that nonce, the node's TLS key and the session key. Collateral (TCB
        status, revocation) is not checked by the SDK.

        ``approved_measurements``: sets like ``{"mrtd": hex, "rtmr3": hex}`` (any may match;
        fields left out are not compared); default: the measurement the public allowlist
        (``GET /v1/attestation``) publishes for the chosen node — that trusts the gateway's
        list, so pass your own for the strongest guarantee. ``suite``:
        ``x25519-sha256-chacha20poly1305`` or ``x25519-sha256-aes128gcm``.

        Raises :class:`AttestationError` (after deleting the session) when the node cannot be
        trusted, ``ValueError`` for malformed arguments, the usual API errors otherwise."""
        plan = _confidential.plan_session(
            model=model,
            approved_measurements=approved_measurements,
            trusted_root_pem=trusted_root_pem,
            policy=policy,
            ttl_s=ttl_s,
            suite=suite,
            request_id=request_id,
        )
        session = self._client._run(plan.create)
        try:
            approved = plan.approved_measurements
            if approved is None:
                allowlist = self._client._run(_calls.get_allowlist(request_id))
                approved = _confidential.allowlist_measurements(allowlist, session.node_id)
            verified = _confidential.verify_session(plan, session, approved)
        except AttestationError as err:
            err.session_id = session.session_id
            err.node_id = err.node_id or session.node_id
            self._abandon(session.session_id)
            raise
        except Exception:
            self._abandon(session.session_id)
            raise
        return ConfidentialSession(self._client, SessionChannel(verified, plan.suite))

    def _abandon(self, session_id: str) -> None:
        """Ends a session the client will not use (best effort: it expires anyway)."""
        try:
            self.delete(session_id)
        except ZmlError:
            pass

    def delete(self, session_id: str, *, request_id: str | None = None) -> None:
        """Ends the session; its id is refused afterwards and its node drops the key."""
        self._client._run(_calls.delete_session(session_id, request_id))


class SessionCompletions:
    def __init__(self, session: ConfidentialSession) -> None:
        self._session = session

    @overload
    def create(
        self,
        *,
        messages: Messages,
        stream: Literal[False] = False,
        model: str | None = None,
        request_id: str | None = None,
        **params: Any,
    ) -> ChatCompletion: ...
    @overload
    def create(
        self,
        *,
        messages: Messages,
        stream: Literal[True],
        model: str | None = None,
        request_id: str | None = None,
        **params: Any,
    ) -> Stream: ...
    def create(
        self,
        *,
        messages: Messages,
        stream: bool = False,
        model: str | None = None,
        request_id: str | None = None,
        **params: Any,
    ) -> ChatCompletion | Stream:
        """An OpenAI chat completion, sealed: the whole body (``model``, ``messages``,
        ``stream`` and every parameter in ``params``) is encrypted to the session's attested
        node, which alone can read it and seals its answer back. ``model`` defaults to (and
        must be) the session's. Returns the opened answer; raises the usual API errors for
        the gateway's errors and :class:`SealedResponseError` for an answer that is not
        sealed to this request or does not open."""
        call, opener = self._session._channel.chat_call(
            messages=messages, stream=stream, model=model, request_id=request_id, params=params
        )
        return self._session._client._sealed_answer(call, opener)


class SessionChat:
    def __init__(self, session: ConfidentialSession) -> None:
        self.completions = SessionCompletions(session)


class ConfidentialSession(SessionView):
    """A verified tier-4 session: ``chat.completions.create(...)`` seals each request to the
    node's session key. The session's fields (``session_id``, ``node_id``, ``model``,
    ``expires_at``, ``attestation``, …) and ``verification`` (the checks that passed) are
    attributes. ``close()`` (or leaving a ``with`` block) ends it."""

    def __init__(self, client: ZML, channel: SessionChannel) -> None:
        super().__init__(channel)
        self._client = client
        self._closed = False
        self.chat = SessionChat(self)

    def delete(self, *, request_id: str | None = None) -> None:
        """Ends the session at the gateway; its node drops the key."""
        self._client.sessions.delete(self.session_id, request_id=request_id)
        self._closed = True

    def close(self) -> None:
        """Ends the session if it is still open; never raises for one already gone."""
        if self._closed:
            return
        try:
            self.delete()
        except ZmlAPIError as err:
            if err.status not in (404, 410):
                raise
        self._closed = True

    def __enter__(self) -> ConfidentialSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
