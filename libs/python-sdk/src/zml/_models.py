"""What the API answers, as typed objects. Each keeps the JSON it came from in ``raw``, so
fields a node adds (logprobs, tool calls, …) stay reachable."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ._routing import Routing, RoutingHeaderError, parse_routing_header


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


@dataclass(frozen=True)
class Message:
    role: str
    content: str | None
    raw: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class Choice:
    index: int
    message: Message
    finish_reason: str | None


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


@dataclass(frozen=True)
class ChatCompletion:
    """A whole answer: the node's chat completion plus how the gateway routed it."""

    id: str
    model: str
    created: int
    choices: list[Choice]
    usage: Usage | None
    routing: Routing
    request_id: str | None
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(
        cls, body: dict[str, Any], routing: Routing, request_id: str | None
    ) -> ChatCompletion:
        choices = []
        for c in _list(body.get("choices")):
            c = _dict(c)
            m = _dict(c.get("message"))
            message = Message(role=str(m.get("role", "")), content=m.get("content"), raw=m)
            choices.append(
                Choice(
                    index=int(c.get("index", 0)),
                    message=message,
                    finish_reason=c.get("finish_reason"),
                )
            )
        u = body.get("usage")
        usage = (
            Usage(
                prompt_tokens=int(u.get("prompt_tokens", 0)),
                completion_tokens=int(u.get("completion_tokens", 0)),
                total_tokens=int(u.get("total_tokens", 0)),
            )
            if isinstance(u, dict)
            else None
        )
        return cls(
            id=str(body.get("id", "")),
            model=str(body.get("model", "")),
            created=int(body.get("created", 0)),
            choices=choices,
            usage=usage,
            routing=routing,
            request_id=request_id,
            raw=body,
        )


@dataclass(frozen=True)
class Delta:
    role: str | None
    content: str | None


@dataclass(frozen=True)
class ChunkChoice:
    index: int
    delta: Delta
    finish_reason: str | None


@dataclass(frozen=True)
class ChatCompletionChunk:
    """One streamed piece (OpenAI ``chat.completion.chunk``)."""

    id: str
    model: str
    choices: list[ChunkChoice]
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> ChatCompletionChunk:
        choices = []
        for c in _list(body.get("choices")):
            c = _dict(c)
            d = _dict(c.get("delta"))
            choices.append(
                ChunkChoice(
                    index=int(c.get("index", 0)),
                    delta=Delta(role=d.get("role"), content=d.get("content")),
                    finish_reason=c.get("finish_reason"),
                )
            )
        return cls(
            id=str(body.get("id", "")),
            model=str(body.get("model", "")),
            choices=choices,
            raw=body,
        )


@dataclass(frozen=True)
class Model:
    id: str
    owned_by: str


JobStatus = Literal["queued", "running", "done", "failed", "expired"]
FINISHED: frozenset[str] = frozenset({"done", "failed", "expired"})


@dataclass(frozen=True)
class JobReceipt:
    """``jobs.submit`` answer. ``duplicate`` is true when this ``job_id`` was already
    queued within the dedupe window (10 minutes): it is the same job."""

    job_id: str
    status: str
    duplicate: bool


@dataclass(frozen=True)
class JobResult:
    outcome: Literal["done", "failed", "expired"]
    http_status: int
    routing: Routing | None
    body: Any
    """The node's answer (a chat completion as JSON when done) or the gateway's error."""

    def completion(self) -> ChatCompletion | None:
        """The result as a :class:`ChatCompletion`, when the job succeeded."""
        if self.outcome != "done" or self.routing is None or not isinstance(self.body, dict):
            return None
        return ChatCompletion.from_json(self.body, self.routing, None)


@dataclass(frozen=True)
class Job:
    job_id: str
    status: JobStatus
    attempts: int
    error_code: str | None
    result: JobResult | None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED and self.result is not None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Job:
        r = body.get("result")
        result = None
        if isinstance(r, dict):
            header = r.get("x-zml-routing")
            routing = None
            if isinstance(header, str):
                try:
                    routing = parse_routing_header(header)
                except RoutingHeaderError:
                    routing = None
            result = JobResult(
                outcome=r.get("outcome", "failed"),
                http_status=int(r.get("http_status", 0)),
                routing=routing,
                body=r.get("body"),
            )
        return cls(
            job_id=str(body.get("job_id", "")),
            status=body.get("status", "queued"),
            attempts=int(body.get("attempts", 0)),
            error_code=body.get("error_code"),
            result=result,
        )


@dataclass(frozen=True)
class SessionAttestation:
    """The session node's TDX quote. Its REPORTDATA binds ``nonce_hex``, the node's TLS key
    and ``session_public_key`` (X25519, base64 SPKI DER); layout in ``libs/tdx/README.md``.
    Verify the quote with Intel DCAP tooling."""

    quote_b64: str
    nonce_hex: str
    session_public_key: str
    tls_key_sha256: str | None
    """SHA-256 (hex) of the SPKI DER of the TLS key the node attested with."""
    measurement: dict[str, Any]
    tcb_status: str | None
    verified_at: int


@dataclass(frozen=True)
class Session:
    """A tier-4 session: requests that carry its ``session_id`` reach only ``node_id``."""

    session_id: str
    node_id: str
    model: str
    tier: int
    created_at: int
    """Epoch milliseconds."""
    expires_at: int
    """Epoch milliseconds."""
    attestation: SessionAttestation

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Session:
        a = _dict(body.get("attestation"))
        return cls(
            session_id=str(body.get("session_id", "")),
            node_id=str(body.get("node_id", "")),
            model=str(body.get("model", "")),
            tier=int(body.get("tier", 4)),
            created_at=int(body.get("created_at", 0)),
            expires_at=int(body.get("expires_at", 0)),
            attestation=SessionAttestation(
                quote_b64=str(a.get("quote_b64", "")),
                nonce_hex=str(a.get("nonce_hex", "")),
                session_public_key=str(a.get("session_public_key", "")),
                tls_key_sha256=a.get("tls_key_sha256"),
                measurement=_dict(a.get("measurement")),
                tcb_status=a.get("tcb_status"),
                verified_at=int(a.get("verified_at", 0)),
            ),
        )
