"""Tier-4 confidential sessions, free of I/O: what ``sessions.create`` asks the gateway, how
it decides whether to trust the answer, and how each request of the session is sealed. The
exchange that runs these steps is ``_flows.open_session``, shared by the sync and async clients."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from . import _calls
from ._attest import (
    INTEL_SGX_ROOT_CA_PEM,
    AttestationResult,
    load_root,
    normalise_measurements,
    verify_session_attestation,
)
from ._calls import Call
from ._core import Messages, sealed_completion
from ._errors import AttestationError
from ._models import ChatCompletion, Session, SessionAttestation
from ._sealed import (
    SEALED_REQUEST_MEDIA_TYPE,
    ResponseOpener,
    SealedChannel,
    SessionPublicKey,
    new_nonce,
    session_public_key,
    suite_of,
)

CHAT_COMPLETIONS_PATH = "/v1/chat/completions"
MEASUREMENT_KEYS = ("mrtd", "rtmr0", "rtmr1", "rtmr2", "rtmr3")


@dataclass(frozen=True)
class SessionPlan:
    """A session about to be opened: the client's own nonce and what it will accept."""

    model: str
    nonce: str
    approved_measurements: list[dict[str, str]] | None
    """The caller's approved sets; ``None``: take the allowlist's for the chosen node."""
    trusted_root_pem: str
    suite: str
    create: Call[Session]


def plan_session(
    *,
    model: str,
    approved_measurements: Sequence[Mapping[str, Any]] | None,
    trusted_root_pem: str | None,
    policy: str | None,
    ttl_s: int | None,
    suite: str,
    request_id: str | None,
) -> SessionPlan:
    """Checks the caller's inputs before anything is sent (``ValueError``) and draws the
    nonce: 32 fresh random bytes the node's quote must bind."""
    suite_of(suite)
    approved = (
        normalise_measurements(approved_measurements) if approved_measurements is not None else None
    )
    root = trusted_root_pem if trusted_root_pem is not None else INTEL_SGX_ROOT_CA_PEM
    load_root(root)
    nonce = new_nonce()
    return SessionPlan(
        model=model,
        nonce=nonce,
        approved_measurements=approved,
        trusted_root_pem=root,
        suite=suite,
        create=_calls.create_session(
            model=model, policy=policy, ttl_s=ttl_s, nonce=nonce, request_id=request_id
        ),
    )


def allowlist_measurements(allowlist: Any, node_id: str) -> list[dict[str, str]]:
    """The measurement the public allowlist (``GET /v1/attestation``) publishes for
    ``node_id``, as an approved set; :class:`AttestationError` when it lists none: the node is
    missing, not ``attested``, or without a measurement."""
    nodes = allowlist.get("nodes") if isinstance(allowlist, dict) else None
    entry = next(
        (n for n in nodes or [] if isinstance(n, dict) and n.get("node_id") == node_id), None
    )
    problem: str | None = None
    measurement: Any = None
    if entry is None:
        problem = f"the allowlist does not list node {node_id}"
    else:
        measurement = entry.get("measurement")
        if entry.get("status") != "attested":
            problem = f"the allowlist lists node {node_id} as {entry.get('status')!r}, not attested"
        elif not isinstance(measurement, dict):
            problem = f"the allowlist has no measurement for node {node_id}"
    if problem is None and isinstance(measurement, dict):
        approved = {"id": f"allowlist:{node_id}"}
        approved.update({k: measurement[k] for k in MEASUREMENT_KEYS if k in measurement})
        try:
            return normalise_measurements([approved])
        except ValueError as err:
            problem = f"the allowlist's measurement for node {node_id} is malformed: {err}"
    raise AttestationError(problem or "no approved measurement", check="measurements", node_id=node_id)


@dataclass(frozen=True)
class VerifiedSession:
    session: Session
    key: SessionPublicKey
    verification: AttestationResult


def verify_session(
    plan: SessionPlan,
    session: Session,
    approved: list[dict[str, str]],
    *,
    at: datetime | None = None,
) -> VerifiedSession:
    """Trusts the session's node only if its quote verifies, its measurement is approved and
    REPORTDATA binds this plan's nonce, the TLS key and exactly the session key; raises
    :class:`AttestationError` otherwise."""
    a = session.attestation
    result = verify_session_attestation(
        {
            "quote_b64": a.quote_b64,
            "nonce_hex": a.nonce_hex,
            "session_public_key": a.session_public_key,
            "tls_key_sha256": a.tls_key_sha256,
        },
        nonce=plan.nonce,
        approved_measurements=approved,
        trusted_root_pem=plan.trusted_root_pem,
        at=at,
    )
    failed = next((c for c in result.checks if not c.ok), None)
    if failed is not None or not result.ok:
        raise AttestationError(
            result.reason or "verification failed",
            check=failed.name if failed else None,
            result=result,
            session_id=session.session_id,
            node_id=session.node_id,
        )
    return VerifiedSession(
        session=session, key=session_public_key(a.session_public_key), verification=result
    )


def _max_tokens(params: Mapping[str, Any]) -> int | None:
    value = params.get("max_tokens")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


class SessionChannel:
    """What the requests of one verified session share: its sealed channel (one HPKE setup,
    made here) and so its sequence numbers (from 0, each request a new one; safe from
    threads and tasks alike)."""

    def __init__(self, verified: VerifiedSession, suite: str) -> None:
        self.session = verified.session
        self.key = verified.key
        self.verification = verified.verification
        self.suite = suite
        self._channel = SealedChannel(
            session_id=self.session.session_id,
            session_public_key_b64=self.session.attestation.session_public_key,
            suite=suite,
        )

    def chat_call(
        self,
        *,
        messages: Messages,
        stream: bool,
        model: str | None,
        request_id: str | None,
        params: Mapping[str, Any],
    ) -> tuple[Call[ChatCompletion], ResponseOpener]:
        """The sealed ``POST /v1/chat/completions``: the whole OpenAI body ``{model,
        messages, stream, **params}`` sealed to the session key; in clear only the
        envelope's routing fields (and ``max_tokens``, the gateway's token estimate)."""
        session_model = self.session.model
        if model is not None and model != session_model:
            raise ValueError(f"this session is for model {session_model!r}, not {model!r}")
        for name in ("model", "messages", "stream"):
            if name in params:
                raise ValueError(f"{name} is not a generation parameter")
        body = {"model": session_model, "messages": list(messages), "stream": stream, **params}
        sealed = self._channel.seal(
            path=CHAT_COMPLETIONS_PATH,
            body=json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8"),
            model=session_model,
            stream=stream,
            max_tokens=_max_tokens(params),
        )
        opener = sealed.opener

        def read(status: int, headers: Any, content: bytes) -> ChatCompletion:
            return sealed_completion(opener, status, headers, content)

        call = Call(
            "POST",
            CHAT_COMPLETIONS_PATH,
            None,
            request_id,
            read,
            content=sealed.body,
            content_type=SEALED_REQUEST_MEDIA_TYPE,
            stream=stream,
            sealed=True,
        )
        return call, opener


class SessionView:
    """The session fields of a verified confidential session (shared by the sync and async
    session objects)."""

    def __init__(self, channel: SessionChannel) -> None:
        self._channel = channel

    @property
    def session(self) -> Session:
        """The session as the gateway answered it."""
        return self._channel.session

    @property
    def session_id(self) -> str:
        return self._channel.session.session_id

    @property
    def node_id(self) -> str:
        """The attested node every request of the session reaches."""
        return self._channel.session.node_id

    @property
    def model(self) -> str:
        return self._channel.session.model

    @property
    def tier(self) -> int:
        return self._channel.session.tier

    @property
    def created_at(self) -> int:
        """Epoch milliseconds."""
        return self._channel.session.created_at

    @property
    def expires_at(self) -> int:
        """Epoch milliseconds."""
        return self._channel.session.expires_at

    @property
    def attestation(self) -> SessionAttestation:
        return self._channel.session.attestation

    @property
    def key_id(self) -> str:
        """SHA-256 (hex) of the session key's SPKI DER: the key the requests are sealed to."""
        return self._channel.key.key_id

    @property
    def suite(self) -> str:
        return self._channel.suite

    @property
    def verification(self) -> AttestationResult:
        """Every check the client ran on the node's quote and binding (all passed)."""
        return self._channel.verification

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(session_id={self.session_id!r}, node_id={self.node_id!r}, "
            f"model={self.model!r}, key_id={self.key_id[:16]}…)"
        )
