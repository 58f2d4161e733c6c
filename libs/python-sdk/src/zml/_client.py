"""The synchronous client, :class:`ZML`: the shared API (``_base_client.py``) over
``httpx.Client``, each flow's I/O done as it asks."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import closing
from types import TracebackType
from typing import Any, TypeVar

import httpx

from ._base_client import ClientBase, StreamBase
from ._calls import Call
from ._core import LineDecoder
from ._flows import Close, Effect, Flow, Read, Send, drive
from ._http_errors import stream_errors, transport_errors
from ._models import ChatCompletion, ChatCompletionChunk, Job, JobReceipt, Model
from ._polling import JobWatch
from ._session_resources import ConfidentialSessionBase

T = TypeVar("T")


class Stream(StreamBase[Iterator[ChatCompletionChunk]], Iterator[ChatCompletionChunk]):
    """A streamed answer: iterate it for the chunks. ``routing`` is known before the first
    chunk. Iteration raises :class:`StreamError` when the stream ends with an error event
    or without ``[DONE]``. Close it (or use ``with``) to stop early."""

    def _read(self, decoder: LineDecoder) -> Iterator[ChatCompletionChunk]:
        with closing(self._response), stream_errors(decoder):
            for line in self._response.iter_lines():
                yield from decoder.feed_all(line)
                if decoder.done:
                    return
            decoder.finish()

    def __next__(self) -> ChatCompletionChunk:
        return next(self._chunks)

    def close(self) -> None:
        self._response.close()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ConfidentialSession(ConfidentialSessionBase[ChatCompletion, Stream, None]):
    """A verified tier-4 session: ``chat.completions.create(...)`` seals each request to the
    node's session key. The session's fields (``session_id``, ``node_id``, ``model``,
    ``expires_at``, ``attestation``, …) and ``verification`` (the checks that passed) are
    attributes. ``close()`` (or leaving a ``with`` block) ends it."""

    def __enter__(self) -> ConfidentialSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ZML(
    ClientBase[
        httpx.Client,
        ChatCompletion,
        Stream,
        list[Model],
        JobReceipt,
        Job,
        Iterator[Job],
        ConfidentialSession,
        None,
    ]
):
    """Client for the ZML API.

    >>> client = ZML(base_url="http://127.0.0.1:8080", api_key="...")
    >>> response = client.infer(model="llama-3.1-8b-instruct", messages=[...])
    >>> response.routing.node
    """

    _http_class = httpx.Client
    _stream_class = Stream
    _session_class = ConfidentialSession

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

    def _drive(self, make: Callable[[], Flow[T]]) -> T:
        return drive(make(), self._perform)

    def _perform(self, effect: Effect) -> Any:
        match effect:
            case Send(call):
                return self._send(call)
            case Read(response):
                return self._read(response)
            case Close(response):
                return response.close()

    def _send(self, call: Call[Any]) -> httpx.Response:
        request = self._http.build_request(**call.http_request(self.base_url, self._api_key))
        with transport_errors(self.base_url):
            return self._http.send(request, stream=True)

    def _read(self, response: httpx.Response) -> bytes:
        with closing(response), transport_errors(self.base_url):
            return response.read()

    def _watch_jobs(
        self, start: Callable[[], JobWatch], get: Callable[[str], Job]
    ) -> Iterator[Job]:
        watch = start()
        while watch.pending:
            for job_id in watch.round():
                job = get(job_id)
                if watch.finished(job_id, job):
                    yield job
            if watch.pending:
                time.sleep(watch.pause())
