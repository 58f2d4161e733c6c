"""TEST ONLY: the TD's side of the sealed channel (``docs/sealed-channel.md``), written from
the doc so the client's side can be round-tripped: a session key pair, opening a sealed
request, and sealing the answer whole or as a stream. The real TD side is ``libs/td-proxy``."""

from __future__ import annotations

import base64
import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from zml import _hpke
from zml._sealed import (
    ANSWER_EXPORT_LABEL,
    ANSWER_SECRET_BYTES,
    CHANNEL_INFO,
    FINAL_EVENT,
    MAX_SEQ,
    MODEL_ID_PATTERN,
    RESPONSE_NONCE_BYTES,
    SEALED_VERSION,
    SESSION_ID_PATTERN,
    SUITES,
    b64url,
    derive_answer_keys,
    from_b64url,
    head_bytes,
    key_id_of,
    request_aad,
    seal_chunk,
)

REPLAY_WINDOW = 1024

FIELDS = {
    "zml_sealed",
    "model",
    "session_id",
    "tier",
    "policy",
    "stream",
    "max_tokens",
    "suite",
    "key_id",
    "seq",
    "enc",
    "ciphertext",
}


class TdError(Exception):
    """What the TD proxy answers in clear: an OpenAI error with this status and code."""

    def __init__(self, status: int, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.param = status, code, message, param
        self.sealer: ResponseSealer | None = None
        """Set when the request opened: the TD then seals its refusal."""

    def body(self) -> bytes:
        error = {"message": self.message, "type": "invalid_request_error", "param": self.param}
        return json.dumps({"error": {**error, "code": self.code}}).encode()


@dataclass
class Channel:
    """One client's channel to a session key, as the TD keeps it: the HPKE context of its
    ``enc`` and the numbers opened in it."""

    suite: _hpke.AeadSuite
    suite_name: str
    context: _hpke.Context
    answer_secret: bytes
    opened: set[int] = field(default_factory=set)


@dataclass
class SessionKey:
    """A session key pair as the TD holds it, with its channels by ``enc``."""

    private: X25519PrivateKey
    spki_der: bytes
    key_id: str
    channels: dict[str, Channel] = field(default_factory=dict)

    @property
    def public_b64(self) -> str:
        return base64.b64encode(self.spki_der).decode()

    @classmethod
    def generate(cls) -> SessionKey:
        private = X25519PrivateKey.generate()
        der = private.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
        return cls(private=private, spki_der=der, key_id=key_id_of(der))


def _invalid(param: str, message: str) -> TdError:
    return TdError(400, "sealed_request_invalid", f"{param}: {message}", param)


def validate_envelope(envelope: Any) -> dict[str, Any]:
    """The envelope's schema (``SealedRequestSchema``): strict, every field checked."""
    if not isinstance(envelope, dict):
        raise _invalid("body", "not a JSON object")
    unknown = set(envelope) - FIELDS
    if unknown:
        raise _invalid(",".join(sorted(unknown)), "unknown field")

    def string(name: str, pattern: str | re.Pattern[str]) -> None:
        value = envelope.get(name)
        if not isinstance(value, str) or not re.match(pattern, value):
            raise _invalid(name, "invalid")

    version = envelope.get("zml_sealed")
    if isinstance(version, bool) or version != SEALED_VERSION:
        raise _invalid("zml_sealed", f"version {SEALED_VERSION} of the sealed format is served")
    string("model", MODEL_ID_PATTERN)
    string("session_id", SESSION_ID_PATTERN)
    if "tier" in envelope and (envelope["tier"] != 4 or isinstance(envelope["tier"], bool)):
        raise _invalid("tier", "must be 4")
    if "policy" in envelope:
        string("policy", r"^[^\r\n]{1,128}$")
    if not isinstance(envelope.get("stream"), bool):
        raise _invalid("stream", "must be a boolean")
    if "max_tokens" in envelope:
        mt = envelope["max_tokens"]
        if isinstance(mt, bool) or not isinstance(mt, int) or mt <= 0:
            raise _invalid("max_tokens", "must be a positive integer")
    if envelope.get("suite") not in SUITES:
        raise _invalid("suite", "unknown suite")
    string("key_id", r"^[0-9a-f]{64}$")
    seq = envelope.get("seq")
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= MAX_SEQ:
        raise _invalid("seq", "must be an integer in [0, 2^53)")
    string("enc", r"^[A-Za-z0-9_-]{43}$")
    string("ciphertext", r"^[A-Za-z0-9_-]{22,}$")
    return envelope


class ResponseSealer:
    """Seals one request's answer: head, then body, chunk by chunk, the last one final."""

    def __init__(
        self,
        suite: _hpke.AeadSuite,
        answer_secret: bytes,
        seq: int,
        response_nonce: bytes | None = None,
    ) -> None:
        self.response_nonce = response_nonce or secrets.token_bytes(RESPONSE_NONCE_BYTES)
        self.keys = derive_answer_keys(suite, answer_secret, seq, self.response_nonce)
        self.next = 0
        self.ended = False

    def seal(self, plaintext: bytes, final: bool) -> bytes:
        if self.ended:
            raise RuntimeError("the answer's final chunk was sealed already")
        self.ended = final
        sealed = seal_chunk(self.keys, self.next, plaintext, final)
        self.next += 1
        return sealed

    def answer(self, status: int, content_type: str, body: bytes) -> bytes:
        """A whole answer: the JSON of ``application/vnd.zml.sealed-response+json``."""
        chunks = [self.seal(head_bytes(status, content_type), not body)]
        if body:
            chunks.append(self.seal(body, True))
        envelope = {
            "zml_sealed": SEALED_VERSION,
            "response_nonce": b64url(self.response_nonce),
            "chunks": [b64url(c) for c in chunks],
        }
        return json.dumps(envelope).encode()

    def stream_head(self, status: int = 200, content_type: str = "text/event-stream") -> str:
        sealed = self.seal(head_bytes(status, content_type), False)
        return f"data: {b64url(self.response_nonce + sealed)}\n\n"

    def stream_event(self, event: bytes) -> str:
        return f"data: {b64url(self.seal(event, False))}\n\n"

    def stream_end(self) -> str:
        return f"event: {FINAL_EVENT}\ndata: {b64url(self.seal(b'', True))}\n\n"


@dataclass
class OpenedRequest:
    body: bytes
    """The client's OpenAI body, as sealed."""
    json: dict[str, Any]
    sealer: ResponseSealer
    envelope: dict[str, Any]


def open_request(
    envelope: Any,
    path: str,
    key: SessionKey,
    *,
    check_replay: bool = True,
) -> OpenedRequest:
    """What the TD proxy does with a sealed request that arrived on ``path``: the envelope
    checked, the key known, its channel found (or set up from ``enc``), the seq fresh in that
    channel, the ciphertext opened at it (the AAD binds ``path`` and every clear field), and
    the body a JSON object whose ``model`` and ``stream`` equal the clear ones. Raises
    :class:`TdError` with the proxy's status and code."""
    env = validate_envelope(envelope)
    if env["key_id"] != key.key_id:
        raise TdError(410, "session_key_unknown", "this TD holds no such session key", "key_id")
    seq: int = env["seq"]
    channel = key.channels.get(env["enc"])
    known = channel is not None
    if channel is None:
        suite = SUITES[env["suite"]]
        try:
            context = _hpke.setup_base_r(
                from_b64url(env["enc"]), key.private, CHANNEL_INFO, suite=suite
            )
        except _hpke.HpkeError as err:
            raise TdError(400, "sealed_request_rejected", "enc is no usable key", "enc") from err
        channel = Channel(
            suite=suite,
            suite_name=env["suite"],
            context=context,
            answer_secret=context.export(ANSWER_EXPORT_LABEL, ANSWER_SECRET_BYTES),
        )
    if env["suite"] != channel.suite_name:
        raise TdError(400, "sealed_request_rejected", "another suite than its channel's", "suite")
    opened = channel.opened
    if check_replay and (seq in opened or (opened and seq <= max(opened) - REPLAY_WINDOW)):
        raise TdError(409, "sealed_request_replayed", f"seq {seq} was opened before", "seq")
    aad = request_aad(
        path=path,
        model=env["model"],
        session_id=env["session_id"],
        stream=env["stream"],
        seq=seq,
        suite=env["suite"],
        key_id=env["key_id"],
    )
    try:
        body = channel.context.open_at(seq, aad, from_b64url(env["ciphertext"]))
    except _hpke.HpkeError as err:
        raise TdError(
            400, "sealed_request_rejected", "the request does not open", "ciphertext"
        ) from err
    if not known:
        key.channels[env["enc"]] = channel
    if check_replay:
        opened.add(seq)
    sealer = ResponseSealer(channel.suite, channel.answer_secret, seq)
    try:
        inner = json.loads(body)
    except ValueError:
        inner = None
    refusal: TdError | None = None
    if not isinstance(inner, dict):
        refusal = _invalid("ciphertext", "the sealed body is not a JSON object")
    elif inner.get("model") != env["model"]:
        refusal = _invalid("model", "the sealed body names another model")
    elif inner.get("stream", False) != env["stream"]:
        refusal = _invalid("stream", "the sealed body's stream differs")
    if refusal is not None or not isinstance(inner, dict):
        assert refusal is not None
        refusal.sealer = sealer
        raise refusal
    return OpenedRequest(body=body, json=inner, sealer=sealer, envelope=env)
