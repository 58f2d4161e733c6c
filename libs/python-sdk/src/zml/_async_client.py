"""The asyncio client, :class:`AsyncZML`: the same calls as :class:`ZML`, awaited."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, TypeVar, overload

import httpx

from . import _calls, _confidential
from ._calls import Call
from ._client import DEFAULT_TIMEOUT_S, settings, transport_error
from ._confidential import SessionChannel, SessionView
from ._core import (
    LineDecoder,
    Messages,
    SealedStreamDecoder,
    StreamDecoder,
    check_event_stream,
    error_from_envelope,
    is_error_answer,
    media_type,
    request_parts,
    routing_of,
    sealed_stream_refusal,
)
from ._errors import APITimeoutError, AttestationError, ZmlAPIError, ZmlError
from ._models import ChatCompletion, ChatCompletionChunk, Job, JobReceipt, Model
from ._routing import Routing
from ._sealed import DEFAULT_SUITE, ResponseOpener

T = TypeVar("T")


class AsyncStream(AsyncIterator[ChatCompletionChunk]):
    """A streamed answer: ``async for`` its chunks; see :class:`zml.Stream`."""

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

    async def _read(self, decoder: LineDecoder) -> AsyncIterator[ChatCompletionChunk]:
        try:
            async for line in self._response.aiter_lines():
                for chunk in decoder.feed_all(line):
                    yield chunk
                if decoder.done:
                    return
            decoder.finish()
        except httpx.HTTPError as err:
            raise decoder.broken(err) from err
        finally:
            await self._response.aclose()

    async def __anext__(self) -> ChatCompletionChunk:
        return await self._chunks.__anext__()

    async def aclose(self) -> None:
        await self._response.aclose()

    async def __aenter__(self) -> AsyncStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncZML:
    """The asyncio client: ``await client.infer(...)``, ``async for chunk in stream``."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self.base_url, self._api_key = settings(base_url, api_key)
        self._http = http_client or httpx.AsyncClient(timeout=timeout)
        self.chat = AsyncChat(self)
        self.models = AsyncModels(self)
        self.jobs = AsyncJobs(self)
        self.sessions = AsyncSessions(self)

    async def _open(self, call: Call[Any]) -> httpx.Response:
        request = self._http.build_request(
            call.method,
            f"{self.base_url}{call.path}",
            **request_parts(
                self._api_key, call.request_id, call.body, call.content, call.content_type
            ),
        )
        try:
            response = await self._http.send(request, stream=True)
        except httpx.HTTPError as err:
            raise transport_error(err, self.base_url) from err
        if is_error_answer(response.status_code, response.headers, call.sealed):
            text = (await self._read(response)).decode("utf-8", "replace")
            raise error_from_envelope(text, status=response.status_code, headers=response.headers)
        return response

    async def _read(self, response: httpx.Response) -> bytes:
        try:
            return await response.aread()
        except httpx.HTTPError as err:
            raise transport_error(err, self.base_url) from err
        finally:
            await response.aclose()

    async def _run(self, call: Call[T]) -> T:
        response = await self._open(call)
        return call.read(response.status_code, response.headers, await self._read(response))

    async def _answer(self, call: Call[ChatCompletion]) -> ChatCompletion | AsyncStream:
        if not call.streams:
            completion: ChatCompletion = await self._run(call)
            return completion
        response = await self._open(call)
        try:
            routing = routing_of(response.status_code, response.headers)
            check_event_stream(response.status_code, response.headers)
        except ZmlAPIError:
            await response.aclose()
            raise
        return AsyncStream(response, routing)

    async def _sealed_answer(
        self, call: Call[ChatCompletion], opener: ResponseOpener
    ) -> ChatCompletion | AsyncStream:
        if not call.streams:
            completion: ChatCompletion = await self._run(call)
            return completion
        response = await self._open(call)
        if media_type(response.headers) != "text/event-stream":
            content = await self._read(response)
            raise sealed_stream_refusal(opener, response.status_code, response.headers, content)
        try:
            routing = routing_of(response.status_code, response.headers)
        except ZmlAPIError:
            await response.aclose()
            raise
        return AsyncStream(
            response, routing, SealedStreamDecoder(opener, response.headers, routing)
        )

    @overload
    async def infer(
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
    async def infer(
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
    ) -> AsyncStream: ...
    async def infer(
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
    ) -> ChatCompletion | AsyncStream:
        """See :meth:`zml.ZML.infer`."""
        return await self._answer(
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

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncZML:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class AsyncCompletions:
    def __init__(self, client: AsyncZML) -> None:
        self._client = client

    @overload
    async def create(
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
    async def create(
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
    ) -> AsyncStream: ...
    async def create(
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
    ) -> ChatCompletion | AsyncStream:
        """See :meth:`zml.Completions.create`."""
        return await self._client._answer(
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


class AsyncChat:
    def __init__(self, client: AsyncZML) -> None:
        self.completions = AsyncCompletions(client)


class AsyncModels:
    def __init__(self, client: AsyncZML) -> None:
        self._client = client

    async def list(self, *, request_id: str | None = None) -> list[Model]:
        return await self._client._run(_calls.list_models(request_id))


class AsyncJobs:
    """See :class:`zml.Jobs`."""

    def __init__(self, client: AsyncZML) -> None:
        self._client = client

    async def submit(
        self,
        *,
        model: str,
        messages: Messages,
        job_id: str | None = None,
        request_id: str | None = None,
        **params: Any,
    ) -> JobReceipt:
        return await self._client._run(
            _calls.submit_job(
                model=model, messages=messages, job_id=job_id, request_id=request_id, params=params
            )
        )

    async def get(self, job_id: str, *, request_id: str | None = None) -> Job:
        return await self._client._run(_calls.get_job(job_id, request_id))

    async def results(
        self,
        job_ids: Iterable[str],
        *,
        poll_interval: float = 0.5,
        timeout: float | None = None,
    ) -> AsyncIterator[Job]:
        pending = list(dict.fromkeys(job_ids))
        deadline = None if timeout is None else time.monotonic() + timeout
        while pending:
            for job_id in list(pending):
                job = await self.get(job_id)
                if job.finished:
                    pending.remove(job_id)
                    yield job
            if pending:
                if deadline is not None and time.monotonic() + poll_interval > deadline:
                    raise APITimeoutError(f"jobs not finished in {timeout} s: {pending}")
                await asyncio.sleep(poll_interval)


class AsyncSessions:
    """See :class:`zml.Sessions`."""

    def __init__(self, client: AsyncZML) -> None:
        self._client = client

    async def create(
        self,
        model: str,
        *,
        approved_measurements: Sequence[Mapping[str, Any]] | None = None,
        trusted_root_pem: str | None = None,
        policy: str | None = None,
        ttl_s: int | None = None,
        suite: str = DEFAULT_SUITE,
        request_id: str | None = None,
    ) -> AsyncConfidentialSession:
        """See :meth:`zml.Sessions.create`: opens and verifies a confidential session."""
        plan = _confidential.plan_session(
            model=model,
            approved_measurements=approved_measurements,
            trusted_root_pem=trusted_root_pem,
            policy=policy,
            ttl_s=ttl_s,
            suite=suite,
            request_id=request_id,
        )
        session = await self._client._run(plan.create)
        try:
            approved = plan.approved_measurements
            if approved is None:
                allowlist = await self._client._run(_calls.get_allowlist(request_id))
                approved = _confidential.allowlist_measurements(allowlist, session.node_id)
            verified = _confidential.verify_session(plan, session, approved)
        except AttestationError as err:
            err.session_id = session.session_id
            err.node_id = err.node_id or session.node_id
            await self._abandon(session.session_id)
            raise
        except Exception:
            await self._abandon(session.session_id)
            raise
        return AsyncConfidentialSession(self._client, SessionChannel(verified, plan.suite))

    async def _abandon(self, session_id: str) -> None:
        try:
            await self.delete(session_id)
        except ZmlError:
            pass

    async def delete(self, session_id: str, *, request_id: str | None = None) -> None:
        await self._client._run(_calls.delete_session(session_id, request_id))


class AsyncSessionCompletions:
    def __init__(self, session: AsyncConfidentialSession) -> None:
        self._session = session

    @overload
    async def create(
        self,
        *,
        messages: Messages,
        stream: Literal[False] = False,
        model: str | None = None,
        request_id: str | None = None,
        **params: Any,
    ) -> ChatCompletion: ...
    @overload
    async def create(
        self,
        *,
        messages: Messages,
        stream: Literal[True],
        model: str | None = None,
        request_id: str | None = None,
        **params: Any,
    ) -> AsyncStream: ...
    async def create(
        self,
        *,
        messages: Messages,
        stream: bool = False,
        model: str | None = None,
        request_id: str | None = None,
        **params: Any,
    ) -> ChatCompletion | AsyncStream:
        """See :meth:`zml.SessionCompletions.create`: a sealed chat completion."""
        call, opener = self._session._channel.chat_call(
            messages=messages, stream=stream, model=model, request_id=request_id, params=params
        )
        return await self._session._client._sealed_answer(call, opener)


class AsyncSessionChat:
    def __init__(self, session: AsyncConfidentialSession) -> None:
        self.completions = AsyncSessionCompletions(session)


class AsyncConfidentialSession(SessionView):
    """See :class:`zml.ConfidentialSession`; ``await session.close()`` or ``async with``."""

    def __init__(self, client: AsyncZML, channel: SessionChannel) -> None:
        super().__init__(channel)
        self._client = client
        self._closed = False
        self.chat = AsyncSessionChat(self)

    async def delete(self, *, request_id: str | None = None) -> None:
        await self._client.sessions.delete(self.session_id, request_id=request_id)
        self._closed = True

    async def close(self) -> None:
        if self._closed:
            return
        try:
            await self.delete()
        except ZmlAPIError as err:
            if err.status not in (404, 410):
                raise
        self._closed = True

    async def __aenter__(self) -> AsyncConfidentialSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
