"""What ``ZML`` and ``AsyncZML`` share above their transports: settings, the API's entry points
(``infer``, ``chat``, ``models``, ``jobs``, ``sessions``) and the state of a stream. Each client
adds only how it sends, reads and waits (``_client.py``, ``_async_client.py``)."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Generic, Literal, TypeVar, cast, overload

import httpx

from . import _calls
from ._calls import Call
from ._confidential import SessionChannel
from ._core import LineDecoder, Messages, StreamDecoder, api_root
from ._errors import ZmlError
from ._flows import Flow
from ._models import ChatCompletion
from ._polling import JobWatch
from ._resources import (
    Chat,
    CompletionT,
    DoneT,
    Jobs,
    JobsT,
    JobT,
    Models,
    ModelsT,
    ReceiptT,
    SessionT,
    StreamT,
    answer_call,
)
from ._routing import Routing
from ._session_resources import ConfidentialSessionBase, Sessions

DEFAULT_TIMEOUT_S = 60.0

HttpT = TypeVar("HttpT", httpx.Client, httpx.AsyncClient)
ChunksT = TypeVar("ChunksT")


def settings(base_url: str | None, api_key: str | None) -> tuple[str, str]:
    """The API root and key, from the arguments or ``ZML_BASE_URL`` / ``ZML_API_KEY``."""
    url = base_url or os.environ.get("ZML_BASE_URL")
    key = api_key or os.environ.get("ZML_API_KEY")
    if not url:
        raise ZmlError("base_url is required (or set ZML_BASE_URL)")
    if not key:
        raise ZmlError("api_key is required (or set ZML_API_KEY)")
    return api_root(url), key


class ClientBase(
    ABC,
    Generic[HttpT, CompletionT, StreamT, ModelsT, ReceiptT, JobT, JobsT, SessionT, DoneT],
):
    """The API of a ZML client over the ``httpx`` client ``HttpT``; the other parameters are
    what its calls return (see ``_resources.py``)."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        http_client: HttpT | None = None,
    ) -> None:
        self.base_url, self._api_key = settings(base_url, api_key)
        self._http: HttpT = http_client or self._http_class(timeout=timeout)
        self.chat: Chat[CompletionT, StreamT] = Chat(self)
        self.models: Models[ModelsT] = Models(self)
        self.jobs: Jobs[ReceiptT, JobT, JobsT] = Jobs(self)
        self.sessions: Sessions[SessionT, DoneT] = Sessions(self)

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
    ) -> CompletionT: ...
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
    ) -> StreamT: ...
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
    ) -> CompletionT | StreamT:
        """ZML's native call (``POST /v1/infer``): strict, so a misspelt field is an error.
        ``params`` are generation parameters (``max_tokens``, ``temperature``, ``top_p``,
        ``stop``, ``seed``)."""

        def call() -> Call[ChatCompletion]:
            return _calls.infer(
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

        return cast("CompletionT | StreamT", answer_call(self, call))

    # What each client does its own way: the kinds it hands out, and the Transport's I/O.

    _http_class: type[HttpT]
    _stream_class: type[StreamBase[Any]]
    _session_class: type[ConfidentialSessionBase[Any, Any, Any]]

    @abstractmethod
    def _drive(self, make: Callable[[], Flow[Any]]) -> Any: ...

    @abstractmethod
    def _watch_jobs(self, start: Callable[[], JobWatch], get: Callable[[str], Any]) -> JobsT: ...

    def _open_stream(
        self, response: httpx.Response, routing: Routing, decoder: LineDecoder
    ) -> StreamBase[Any]:
        return self._stream_class(response, routing, decoder)

    def _confidential_session(self, channel: SessionChannel) -> Any:
        return self._session_class(self, channel)


class StreamBase(Generic[ChunksT]):
    """What a stream knows before its first chunk: ``routing`` and ``request_id``. The sync
    and async streams add how they read the answer's lines (``_chunks``)."""

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

    def _read(self, decoder: LineDecoder) -> ChunksT:
        raise NotImplementedError
