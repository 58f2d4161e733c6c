"""The API's calls as the clients expose them (``client.chat.completions``, ``client.models``,
``client.jobs``), written once for ``ZML`` and ``AsyncZML``. Each builds its call and hands its
flow to the client's :class:`Transport`; the type parameters say what the client returns: the
answer itself (``ZML``) or a coroutine for it (``AsyncZML``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, Literal, Protocol, TypeVar, cast, overload

import httpx

from . import _calls, _flows
from ._calls import Call
from ._confidential import SessionChannel
from ._core import LineDecoder, Messages
from ._flows import Flow
from ._models import ChatCompletion
from ._polling import JobWatch
from ._routing import Routing

# What a call returns in a given client: the value (``ZML``) or a coroutine for it
# (``AsyncZML``). Python's types cannot say "T, or a coroutine for T" once for all T, hence
# one parameter per kind of answer; the Transport's ``_drive`` returns the one the client binds.
CompletionT = TypeVar("CompletionT")
"""A chat completion."""
StreamT = TypeVar("StreamT")
"""A stream of chunks (``Stream`` or ``AsyncStream``)."""
ModelsT = TypeVar("ModelsT")
"""The list of models."""
ReceiptT = TypeVar("ReceiptT")
"""A job's receipt."""
JobT = TypeVar("JobT")
"""A job."""
JobsT = TypeVar("JobsT")
"""The iterator over finished jobs (sync or async)."""
SessionT = TypeVar("SessionT")
"""A verified confidential session (``ConfidentialSession`` or ``AsyncConfidentialSession``)."""
DoneT = TypeVar("DoneT")
"""The end of a call that answers nothing."""


class Transport(Protocol):
    """What the API classes need from a client: a way to run a flow, and the client's own
    kinds of stream, session and job iterator."""

    def _drive(self, make: Callable[[], Flow[Any]]) -> Any:
        """Runs the flow ``make()`` builds and returns its value, or a coroutine for it.
        ``make`` is called only when the run starts, so an async call raises argument errors
        when it is awaited, as an ``async def`` would."""

    def _open_stream(self, response: httpx.Response, routing: Routing, decoder: LineDecoder) -> Any:
        """The client's stream over an event-stream answer whose head has been checked."""

    def _confidential_session(self, channel: SessionChannel) -> Any:
        """The client's session object for a verified session."""

    def _watch_jobs(self, start: Callable[[], JobWatch], get: Callable[[str], Any]) -> Any:
        """The client's iterator over jobs as they finish: a watch from ``start()`` when the
        iteration begins, each job fetched with ``get``."""


def run_call(client: Transport, build: Callable[[], Call[Any]]) -> Any:
    """Runs the call ``build()`` makes, built when the run starts, and reads its answer."""
    return client._drive(lambda: _flows.run(build()))


def answer_call(client: Transport, build: Callable[[], Call[ChatCompletion]]) -> Any:
    """Runs the chat call ``build()`` makes, built when the run starts: a completion, or the
    client's stream when the call streams."""
    return client._drive(lambda: _flows.answer(build(), None, client._open_stream))


class Completions(Generic[CompletionT, StreamT]):
    def __init__(self, client: Transport) -> None:
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
    ) -> CompletionT: ...
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
    ) -> StreamT: ...
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
    ) -> CompletionT | StreamT:
        """The OpenAI-compatible call (``POST /v1/chat/completions``) with ZML's routing
        fields alongside: ``models`` is the fallback chain, ``provider={"sort": "quality"}``
        opts into quality routing. Other OpenAI parameters go in ``params`` unchanged."""

        def call() -> Call[ChatCompletion]:
            return _calls.chat(
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

        return cast("CompletionT | StreamT", answer_call(self._client, call))


class Chat(Generic[CompletionT, StreamT]):
    def __init__(self, client: Transport) -> None:
        self.completions: Completions[CompletionT, StreamT] = Completions(client)


class Models(Generic[ModelsT]):
    def __init__(self, client: Transport) -> None:
        self._client = client

    def list(self, *, request_id: str | None = None) -> ModelsT:
        """The models the fleet serves (``GET /v1/models``)."""
        return cast(ModelsT, run_call(self._client, lambda: _calls.list_models(request_id)))


class Jobs(Generic[ReceiptT, JobT, JobsT]):
    """Batch jobs (``/v1/jobs``), queued on JetStream and run as capacity allows."""

    def __init__(self, client: Transport) -> None:
        self._client = client

    def submit(
        self,
        *,
        model: str,
        messages: Messages,
        job_id: str | None = None,
        request_id: str | None = None,
        **params: Any,
    ) -> ReceiptT:
        """Queues one chat completion as a job. ``job_id`` (letters, digits, ``-``, ``_``;
        at most 64) is the dedupe key; ``params`` are ZML and OpenAI fields."""

        def call() -> Call[Any]:
            return _calls.submit_job(
                model=model, messages=messages, job_id=job_id, request_id=request_id, params=params
            )

        return cast(ReceiptT, run_call(self._client, call))

    def get(self, job_id: str, *, request_id: str | None = None) -> JobT:
        """One job's state; a finished job carries its ``result``."""
        return cast(JobT, run_call(self._client, lambda: _calls.get_job(job_id, request_id)))

    def results(
        self,
        job_ids: Iterable[str],
        *,
        poll_interval: float = 0.5,
        timeout: float | None = None,
    ) -> JobsT:
        """Yields each job once it has finished (done, failed or expired), in the order
        they finish. Raises :class:`APITimeoutError` if ``timeout`` seconds pass first."""

        def start() -> JobWatch:
            return JobWatch(
                job_ids, poll_interval=poll_interval, timeout=timeout, clock=time.monotonic
            )

        return cast(JobsT, self._client._watch_jobs(start, self.get))
