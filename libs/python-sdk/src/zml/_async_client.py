"""The asyncio client, :class:`AsyncZML`: the same API as :class:`ZML` (``_base_client.py``)
over ``httpx.AsyncClient``, each call a coroutine that awaits its flow's I/O."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import aclosing
from types import TracebackType
from typing import Any, TypeVar

import httpx

from ._base_client import ClientBase, StreamBase
from ._calls import Call
from ._core import LineDecoder
from ._flows import Close, Effect, Flow, Read, Send, Stepper
from ._http_errors import stream_errors, transport_errors
from ._models import ChatCompletion, ChatCompletionChunk, Job, JobReceipt, Model
from ._polling import JobWatch
from ._session_resources import ConfidentialSessionBase

T = TypeVar("T")
Async = Coroutine[Any, Any, T]
"""What an async call returns: a coroutine for the answer."""


class AsyncStream(
    StreamBase[AsyncIterator[ChatCompletionChunk]], AsyncIterator[ChatCompletionChunk]
):
    """A streamed answer: ``async for`` its chunks; see :class:`zml.Stream`."""

    async def _read(self, decoder: LineDecoder) -> AsyncIterator[ChatCompletionChunk]:
        async with aclosing(self._response):
            with stream_errors(decoder):
                async for line in self._response.aiter_lines():
                    for chunk in decoder.feed_all(line):
                        yield chunk
                    if decoder.done:
                        return
                decoder.finish()

    async def __anext__(self) -> ChatCompletionChunk:
        return await self._chunks.__anext__()

    async def aclose(self) -> None:
        await self._response.aclose()

    async def __aenter__(self) -> AsyncStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncConfidentialSession(
    ConfidentialSessionBase[Async[ChatCompletion], Async[AsyncStream], Async[None]]
):
    """See :class:`zml.ConfidentialSession`; ``await session.close()`` or ``async with``."""

    async def __aenter__(self) -> AsyncConfidentialSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncZML(
    ClientBase[
        httpx.AsyncClient,
        Async[ChatCompletion],
        Async[AsyncStream],
        Async[list[Model]],
        Async[JobReceipt],
        Async[Job],
        AsyncIterator[Job],
        Async[AsyncConfidentialSession],
        Async[None],
    ]
):
    """The asyncio client: ``await client.infer(...)``, ``async for chunk in stream``."""

    _http_class = httpx.AsyncClient
    _stream_class = AsyncStream
    _session_class = AsyncConfidentialSession

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

    async def _drive(self, make: Callable[[], Flow[T]]) -> T:
        stepper = Stepper(make())
        while (effect := stepper.effect) is not None:
            try:
                result = await self._perform(effect)
            except Exception as err:
                stepper.throw(err)
            else:
                stepper.send(result)
        return stepper.value

    async def _perform(self, effect: Effect) -> Any:
        match effect:
            case Send(call):
                return await self._send(call)
            case Read(response):
                return await self._read(response)
            case Close(response):
                return await response.aclose()

    async def _send(self, call: Call[Any]) -> httpx.Response:
        request = self._http.build_request(**call.http_request(self.base_url, self._api_key))
        with transport_errors(self.base_url):
            return await self._http.send(request, stream=True)

    async def _read(self, response: httpx.Response) -> bytes:
        async with aclosing(response):
            with transport_errors(self.base_url):
                return await response.aread()

    async def _watch_jobs(
        self, start: Callable[[], JobWatch], get: Callable[[str], Awaitable[Job]]
    ) -> AsyncIterator[Job]:
        watch = start()
        while watch.pending:
            for job_id in watch.round():
                job = await get(job_id)
                if watch.finished(job_id, job):
                    yield job
            if watch.pending:
                await asyncio.sleep(watch.pause())
