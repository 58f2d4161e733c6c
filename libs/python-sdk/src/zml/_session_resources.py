"""Tier-4 sessions as the clients expose them (``client.sessions``, the session object and its
``chat.completions``), written once for ``ZML`` and ``AsyncZML`` as ``_resources.py`` is."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Generic, Literal, cast, overload

from . import _calls, _confidential, _flows
from ._confidential import SessionChannel, SessionView
from ._core import Messages
from ._errors import ZmlAPIError
from ._flows import Flow
from ._resources import CompletionT, DoneT, SessionT, StreamT, Transport, run_call
from ._sealed import DEFAULT_SUITE


class Sessions(Generic[SessionT, DoneT]):
    """Tier-4 sessions: requests sealed to one attested node's key for the session's life."""

    def __init__(self, client: Transport) -> None:
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
    ) -> SessionT:
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
        client = self._client

        def flow() -> Flow[Any]:
            plan = _confidential.plan_session(
                model=model,
                approved_measurements=approved_measurements,
                trusted_root_pem=trusted_root_pem,
                policy=policy,
                ttl_s=ttl_s,
                suite=suite,
                request_id=request_id,
            )
            return _flows.open_session(plan, request_id, client._confidential_session)

        return cast(SessionT, client._drive(flow))

    def delete(self, session_id: str, *, request_id: str | None = None) -> DoneT:
        """Ends the session; its id is refused afterwards and its node drops the key."""
        return cast(
            DoneT, run_call(self._client, lambda: _calls.delete_session(session_id, request_id))
        )


class SessionCompletions(Generic[CompletionT, StreamT]):
    def __init__(self, client: Transport, channel: SessionChannel) -> None:
        self._client = client
        self._channel = channel

    @overload
    def create(
        self,
        *,
        messages: Messages,
        stream: Literal[False] = False,
        model: str | None = None,
        request_id: str | None = None,
        **params: Any,
    ) -> CompletionT: ...
    @overload
    def create(
        self,
        *,
        messages: Messages,
        stream: Literal[True],
        model: str | None = None,
        request_id: str | None = None,
        **params: Any,
    ) -> StreamT: ...
    def create(
        self,
        *,
        messages: Messages,
        stream: bool = False,
        model: str | None = None,
        request_id: str | None = None,
        **params: Any,
    ) -> CompletionT | StreamT:
        """An OpenAI chat completion, sealed: the whole body (``model``, ``messages``,
        ``stream`` and every parameter in ``params``) is encrypted to the session's attested
        node, which alone can read it and seals its answer back. ``model`` defaults to (and
        must be) the session's. Returns the opened answer; raises the usual API errors for
        the gateway's errors and :class:`SealedResponseError` for an answer that is not
        sealed to this request or does not open."""
        client = self._client

        def flow() -> Flow[Any]:
            call, opener = self._channel.chat_call(
                messages=messages, stream=stream, model=model, request_id=request_id, params=params
            )
            return _flows.answer(call, opener, client._open_stream)

        return cast("CompletionT | StreamT", client._drive(flow))


class SessionChat(Generic[CompletionT, StreamT]):
    def __init__(self, client: Transport, channel: SessionChannel) -> None:
        self.completions: SessionCompletions[CompletionT, StreamT] = SessionCompletions(
            client, channel
        )


class ConfidentialSessionBase(SessionView, Generic[CompletionT, StreamT, DoneT]):
    """A verified tier-4 session: ``chat.completions.create(...)`` seals each request to the
    node's session key. The session's fields (``session_id``, ``node_id``, ``model``,
    ``expires_at``, ``attestation``, …) and ``verification`` (the checks that passed) are
    attributes. ``close()`` ends it."""

    def __init__(self, client: Transport, channel: SessionChannel) -> None:
        super().__init__(channel)
        self._client = client
        self._closed = False
        self.chat: SessionChat[CompletionT, StreamT] = SessionChat(client, channel)

    def delete(self, *, request_id: str | None = None) -> DoneT:
        """Ends the session at the gateway; its node drops the key."""
        return cast(DoneT, self._client._drive(lambda: self._end(request_id, if_open=False)))

    def close(self) -> DoneT:
        """Ends the session if it is still open; never raises for one already gone."""
        return cast(DoneT, self._client._drive(lambda: self._end(None, if_open=True)))

    def _end(self, request_id: str | None, *, if_open: bool) -> Flow[None]:
        if if_open and self._closed:
            return
        try:
            yield from _flows.run(_calls.delete_session(self.session_id, request_id))
        except ZmlAPIError as err:
            if not if_open or err.status not in (404, 410):
                raise
        self._closed = True
