"""The synchronous client, :class:`ZML`."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, TypeVar, overload

import httpx

from . import _calls
from ._calls import Call
from ._core import (
    Messages,
    StreamDecoder,
    api_root,
    check_event_stream,
    error_from_envelope,
    request_headers,
    routing_of,
)
from ._errors import APIConnectionError, APITimeoutError, ZmlAPIError, ZmlError
from ._models import ChatCompletion, ChatCompletionChunk, Job, JobReceipt, Model, Session
from ._routing import Routing

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

    def __init__(self, response: httpx.Response, routing: Routing) -> None:
        self.routing = routing
        self.request_id: str | None = response.headers.get("x-request-id")
        self._response = response
        self._chunks = self._read(StreamDecoder(response.headers, routing))

    def _read(self, decoder: StreamDecoder) -> Iterator[ChatCompletionChunk]:
        try:
            for line in self._response.iter_lines():
                chunk = decoder.feed(line)
                if chunk is not None:
                    yield chunk
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
            headers=request_headers(self._api_key, call.request_id),
            json=call.body,
        )
        try:
            response = self._http.send(request, stream=True)
        except httpx.HTTPError as err:
            raise transport_error(err, self.base_url) from err
        if response.status_code >= 400:
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
    """Tier-4 sessions: requests pinned to one attested node for the session's life."""

    def __init__(self, client: ZML) -> None:
        self._client = client

    def create(
        self,
        *,
        model: str,
        policy: str | None = None,
        ttl_s: int | None = None,
        nonce: str | None = None,
        request_id: str | None = None,
    ) -> Session:
        """Opens a session on a freshly attested tier-4 node. ``nonce`` (32 bytes, hex) is
        bound into the node's quote; without one the gateway draws it. Send the session's
        requests with ``tier=4, session_id=session.session_id``."""
        return self._client._run(
            _calls.create_session(
                model=model, policy=policy, ttl_s=ttl_s, nonce=nonce, request_id=request_id
            )
        )

    def delete(self, session_id: str, *, request_id: str | None = None) -> None:
        """Ends the session; its id is refused afterwards."""
        self._client._run(_calls.delete_session(session_id, request_id))
