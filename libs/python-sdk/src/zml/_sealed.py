"""The client's side of the tier-4 sealed channel (``docs/sealed-channel.md``): one HPKE
setup per session to the attested TD's session key (a :class:`SealedChannel`), each request
sealed in it at its own sequence number, and the TD's chunked sealed answer opened with keys
derived from the channel's exported answer secret and that number.

Free of I/O: the clients post what :meth:`SealedChannel.seal` builds and feed the answer to
its :class:`ResponseOpener`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import secrets
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from cryptography.exceptions import InvalidTag

from . import _hpke
from ._errors import SealedResponseError

SEALED_VERSION = 2
"""2: one HPKE setup per channel (a session), each request a message of it. Version 1 (an
HPKE setup per request) is refused by gateways and TDs that speak 2."""
SEALED_REQUEST_MEDIA_TYPE = "application/vnd.zml.sealed-request+json"
SEALED_RESPONSE_MEDIA_TYPE = "application/vnd.zml.sealed-response+json"

SealedSuite = Literal["x25519-sha256-chacha20poly1305", "x25519-sha256-aes128gcm"]
DEFAULT_SUITE: SealedSuite = "x25519-sha256-chacha20poly1305"
SUITES: dict[str, _hpke.AeadSuite] = {
    "x25519-sha256-chacha20poly1305": _hpke.CHACHA20POLY1305,
    "x25519-sha256-aes128gcm": _hpke.AES128GCM,
}

CHANNEL_INFO = b"zml-sealed/2 channel"
ANSWER_EXPORT_LABEL = b"zml-sealed/2 answer"
ANSWER_KEYS_LABEL = b"zml-sealed/2 answer keys"
AAD_PREFIX = "zml-sealed/2"
FINAL_CHUNK_AAD = b"final"
RESPONSE_NONCE_BYTES = 32
ANSWER_SECRET_BYTES = 32
FINAL_EVENT = "final"
MAX_SEQ = 2**53 - 1
MAX_CHUNKS = 2**32
"""Chunks one answer may have (the TypeScript side counts in the nonce's last four bytes)."""

X25519_SPKI_PREFIX = bytes.fromhex("302a300506032b656e032100")
"""DER of an X25519 SubjectPublicKeyInfo up to the key itself (RFC 8410)."""

MODEL_ID_PATTERN = re.compile(r"^[-/=\w]+(\.[-/=\w]+)*$", re.ASCII)
SESSION_ID_PATTERN = re.compile(r"^ses-[0-9a-f]{32}$")
_BASE64URL = re.compile(r"^[A-Za-z0-9_-]*$")


# --- Encodings ------------------------------------------------------------------------------


def b64url(data: bytes) -> str:
    """base64url without padding."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def from_b64url(text: str) -> bytes:
    """Decodes base64url without padding; raises ``ValueError`` on anything else."""
    if not _BASE64URL.match(text) or len(text) % 4 == 1:
        raise ValueError("not base64url without padding")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class SessionPublicKey:
    """A session's published key as a client holds it."""

    key_id: str
    """Lowercase hex SHA-256 of the SPKI DER: the envelope's ``key_id``."""
    raw: bytes
    """The raw X25519 key: HPKE's ``pkR`` (the last 32 bytes of the DER)."""
    spki_der: bytes


def key_id_of(spki_der: bytes) -> str:
    return hashlib.sha256(spki_der).hexdigest()


def session_public_key(spki_b64: str) -> SessionPublicKey:
    """Reads ``session_public_key`` (base64 SPKI DER of an X25519 key); raises ``ValueError``
    when it is not one."""
    try:
        text = spki_b64.strip()
        der = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError) as err:
        raise ValueError("session_public_key is not base64") from err
    if len(der) != len(X25519_SPKI_PREFIX) + _hpke.N_PK or not der.startswith(X25519_SPKI_PREFIX):
        raise ValueError("session_public_key is not an X25519 SubjectPublicKeyInfo")
    return SessionPublicKey(key_id=key_id_of(der), raw=der[len(X25519_SPKI_PREFIX) :], spki_der=der)


def suite_of(name: str) -> _hpke.AeadSuite:
    try:
        return SUITES[name]
    except KeyError:
        raise ValueError(f"unknown sealed suite {name!r} (one of {', '.join(SUITES)})") from None


def request_aad(
    *,
    path: str,
    model: str,
    session_id: str,
    stream: bool,
    seq: int,
    suite: str,
    key_id: str,
) -> bytes:
    """The request's AAD: every clear field the TD acts on, one per line, no final LF."""
    lines = [AAD_PREFIX, path, model, session_id, "1" if stream else "0", str(seq), suite, key_id]
    return "\n".join(lines).encode("utf-8")


# --- The answer's keys and chunks -----------------------------------------------------------


@dataclass(frozen=True)
class ResponseKeys:
    """One answer's AEAD (made once, reused for every chunk with the counter nonce) and base
    nonce."""

    suite: _hpke.AeadSuite
    aead: Any
    base_nonce: bytes


def derive_answer_keys(
    suite: _hpke.AeadSuite, answer_secret: bytes, seq: int, response_nonce: bytes
) -> ResponseKeys:
    """``okm = HKDF-Expand(answer_secret, "zml-sealed/2 answer keys" ‖ I2OSP(seq, 8) ‖
    response_nonce, Nk + Nn)``; the key is ``okm[:Nk]``, the base nonce ``okm[Nk:]``. The
    answer secret is HPKE's exporter output, already a pseudorandom key: no Extract first."""
    info = ANSWER_KEYS_LABEL + seq.to_bytes(8, "big") + response_nonce
    okm = _hpke.hkdf_expand(answer_secret, info, suite.key_bytes + suite.nonce_bytes)
    return ResponseKeys(
        suite=suite,
        aead=_hpke.aead_cipher(suite, okm[: suite.key_bytes]),
        base_nonce=okm[suite.key_bytes :],
    )


def _chunk_nonce(keys: ResponseKeys, index: int) -> bytes:
    if not 0 <= index < MAX_CHUNKS:
        raise ValueError("too many chunks in one answer")
    return _hpke.xor_nonce(keys.base_nonce, index)


def seal_chunk(keys: ResponseKeys, index: int, plaintext: bytes, final: bool) -> bytes:
    aad = FINAL_CHUNK_AAD if final else b""
    sealed: bytes = keys.aead.encrypt(_chunk_nonce(keys, index), plaintext, aad)
    return sealed


def open_chunk(keys: ResponseKeys, index: int, sealed: bytes, final: bool) -> bytes | None:
    """The chunk's plaintext, or ``None`` when it does not open as chunk ``index``."""
    if len(sealed) < _hpke.TAG_BYTES:
        return None
    aad = FINAL_CHUNK_AAD if final else b""
    try:
        plain: bytes = keys.aead.decrypt(_chunk_nonce(keys, index), sealed, aad)
    except InvalidTag:
        return None
    return plain


def head_bytes(status: int, content_type: str) -> bytes:
    """The plaintext of chunk 0: ``{"status":…,"content_type":…}``."""
    return json.dumps(
        {"status": status, "content_type": content_type}, separators=(",", ":")
    ).encode("utf-8")


# --- Opening an answer ----------------------------------------------------------------------


@dataclass(frozen=True)
class SealedHead:
    """The TD's server's own status and content type (chunk 0 of every answer)."""

    status: int
    content_type: str


@dataclass(frozen=True)
class OpenedAnswer:
    status: int
    content_type: str
    body: bytes


@dataclass(frozen=True)
class StreamHead:
    head: SealedHead


@dataclass(frozen=True)
class StreamEvent:
    """One of the server's events, opened: its bytes, closing blank line included."""

    data: bytes


@dataclass(frozen=True)
class StreamEnd:
    """The chunk sealed as final: the stream is complete."""


@dataclass(frozen=True)
class GatewayError:
    """An ``event: error`` the gateway wrote in clear: its ``data``, an OpenAI error body."""

    data: str


StreamPart = StreamHead | StreamEvent | StreamEnd | GatewayError


def _invalid(message: str) -> SealedResponseError:
    return SealedResponseError(message)


def _decode(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise _invalid(f"{what} is missing")
    try:
        return from_b64url(value)
    except ValueError:
        raise _invalid(f"{what} is not base64url") from None


def _read_head(plain: bytes) -> SealedHead:
    try:
        head = json.loads(plain)
    except ValueError:
        raise _invalid("the answer's head is not JSON") from None
    if not isinstance(head, dict):
        raise _invalid("the answer's head is not a JSON object")
    status, content_type = head.get("status"), head.get("content_type")
    if isinstance(status, bool) or not isinstance(status, int) or not isinstance(content_type, str):
        raise _invalid("the answer's head has no status and content type")
    return SealedHead(status=status, content_type=content_type)


class ResponseOpener:
    """Opens the answer to one sealed request, and only that one's: its keys come from the
    channel's answer secret and the request's ``seq``."""

    def __init__(self, suite: _hpke.AeadSuite, answer_secret: bytes, seq: int) -> None:
        self.suite = suite
        self._answer_secret = answer_secret
        self.seq = seq

    def keys(self, response_nonce: bytes) -> ResponseKeys:
        if len(response_nonce) != RESPONSE_NONCE_BYTES:
            raise _invalid(f"the answer's response nonce is not {RESPONSE_NONCE_BYTES} bytes")
        return derive_answer_keys(self.suite, self._answer_secret, self.seq, response_nonce)

    def open_answer(self, content: bytes) -> OpenedAnswer:
        """Opens a whole answer (the JSON of ``application/vnd.zml.sealed-response+json``).
        Raises :class:`SealedResponseError`."""
        try:
            envelope = json.loads(content)
        except ValueError:
            raise _invalid("the answer is not a sealed answer") from None
        if (
            not isinstance(envelope, dict)
            or envelope.get("zml_sealed") != SEALED_VERSION
            or isinstance(envelope.get("zml_sealed"), bool)
            or not isinstance(envelope.get("chunks"), list)
        ):
            raise _invalid("the answer is not a sealed answer")
        keys = self.keys(_decode(envelope.get("response_nonce"), "response_nonce"))
        chunks: list[Any] = envelope["chunks"]
        if not 1 <= len(chunks) <= 2:
            raise _invalid("a sealed answer has 1 or 2 chunks")
        opened: list[bytes] = []
        for i, chunk in enumerate(chunks):
            plain = open_chunk(keys, i, _decode(chunk, f"chunks.{i}"), i == len(chunks) - 1)
            if plain is None:
                raise _invalid(f"chunk {i} of the answer does not open")
            opened.append(plain)
        head = _read_head(opened[0])
        body = opened[1] if len(opened) > 1 else b""
        return OpenedAnswer(status=head.status, content_type=head.content_type, body=body)

    def stream_reader(self) -> SealedStreamReader:
        """A reader for this request's sealed event stream."""
        return SealedStreamReader(self)


class SealedStreamReader:
    """Reads a sealed stream event by event. Feed it lines (:meth:`feed_line`, as
    ``httpx``'s ``iter_lines`` gives them) or raw bytes (:meth:`push`); each completed event
    gives at most one part. Each event must open as the next chunk; only the chunk sealed as
    final (AAD ``"final"``) ends the stream — the clear ``event: final`` merely says which
    AAD to try. Raises :class:`SealedResponseError` on anything else."""

    def __init__(self, opener: ResponseOpener) -> None:
        self._opener = opener
        self._keys: ResponseKeys | None = None
        self._next = 0
        self._event = ""
        self._data: list[str] = []
        self._pending = b""
        self.head: SealedHead | None = None
        self.ended = False
        """True once the final chunk has opened."""

    def feed_line(self, line: str) -> StreamPart | None:
        line = line.rstrip("\r\n")
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None

    def push(self, data: bytes) -> list[StreamPart]:
        """Raw stream bytes (any split): the parts they complete."""
        self._pending += data
        parts: list[StreamPart] = []
        while True:
            cut = re.search(rb"\r\n|\n|\r(?!$)", self._pending)
            if cut is None:
                break
            line = self._pending[: cut.start()].decode("utf-8", "replace")
            self._pending = self._pending[cut.end() :]
            part = self.feed_line(line)
            if part is not None:
                parts.append(part)
        return parts

    def feed(self, lines: Iterable[str]) -> list[StreamPart]:
        parts = [self.feed_line(line) for line in lines]
        return [p for p in parts if p is not None]

    def finish(self) -> None:
        """Call when the bytes end: raises when the stream stopped before its final chunk."""
        if not self.ended:
            raise _invalid("the sealed stream ended before its final chunk (truncated)")

    def _dispatch(self) -> StreamPart | None:
        name, data = self._event or "message", self._data
        self._event, self._data = "", []
        if not data:
            return None
        if name == "error":
            return GatewayError(data="\n".join(data))
        if self.ended:
            raise _invalid("an event arrived after the final chunk")
        sealed = _decode("".join(data), "event data")
        if self._keys is None:
            self._keys = self._opener.keys(sealed[:RESPONSE_NONCE_BYTES])
            sealed = sealed[RESPONSE_NONCE_BYTES:]
        final = name == FINAL_EVENT
        index = self._next
        self._next += 1
        plain = open_chunk(self._keys, index, sealed, final)
        if plain is None:
            raise _invalid(f"chunk {index} of the stream does not open")
        if index == 0:
            if final:
                raise _invalid("the stream ended at its head")
            self.head = _read_head(plain)
            return StreamHead(self.head)
        if final:
            if plain:
                raise _invalid("the stream's final chunk is not empty")
            self.ended = True
            return StreamEnd()
        return StreamEvent(plain)


# --- Sealing a request ----------------------------------------------------------------------


@dataclass(frozen=True)
class SealedRequest:
    envelope: dict[str, Any]
    """The envelope, as JSON data."""
    body: bytes
    """The envelope as the bytes to post (``application/vnd.zml.sealed-request+json``)."""
    opener: ResponseOpener
    """Opens this request's answer, and only this one's."""


def _check_fields(
    path: str, model: str, session_id: str, seq: int, policy: str | None, max_tokens: int | None
) -> None:
    if not path.startswith("/") or "\n" in path or "\r" in path:
        raise ValueError("path must be an absolute path without line breaks")
    if not MODEL_ID_PATTERN.match(model):
        raise ValueError(f"model {model!r} is not a model id")
    if not SESSION_ID_PATTERN.match(session_id):
        raise ValueError(f"session_id {session_id!r} is not ses- and 32 lowercase hex")
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= MAX_SEQ:
        raise ValueError(f"seq must be an integer in [0, 2^53): {seq!r}")
    if policy is not None and (not 1 <= len(policy) <= 128 or re.search(r"[\r\n]", policy)):
        raise ValueError("policy must be 1-128 characters without line breaks")
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0
    ):
        raise ValueError("max_tokens must be a positive integer")


class SealedChannel:
    """The client's side of a channel to a session's key: one HPKE setup (``SetupBaseS``,
    one X25519 key pair and agreement) when it is made, then each request sealed with one
    AEAD at its own sequence number. ``session_public_key_b64`` is the session's
    ``session_public_key`` (base64 SPKI DER), to be used only after its quote verified.
    ``ephemeral`` (an ``X25519PrivateKey``) fixes HPKE's ephemeral key, for tests only. Safe
    from threads and tasks alike: each request gets a number of its own."""

    def __init__(
        self,
        *,
        session_id: str,
        session_public_key_b64: str,
        suite: str = DEFAULT_SUITE,
        ephemeral: Any = None,
    ) -> None:
        self.aead = suite_of(suite)
        self.suite = suite
        if not SESSION_ID_PATTERN.match(session_id):
            raise ValueError(f"session_id {session_id!r} is not ses- and 32 lowercase hex")
        self.session_id = session_id
        self.key = session_public_key(session_public_key_b64)
        enc, self._context = _hpke.setup_base_s(
            self.key.raw, CHANNEL_INFO, suite=self.aead, ephemeral=ephemeral
        )
        self.enc = b64url(enc)
        self._answer_secret = self._context.export(ANSWER_EXPORT_LABEL, ANSWER_SECRET_BYTES)
        self._next_seq = 0
        self._lock = threading.Lock()

    def seal(
        self,
        *,
        path: str,
        body: bytes,
        model: str,
        stream: bool,
        seq: int | None = None,
        tier: int | None = 4,
        policy: str | None = None,
        max_tokens: int | None = None,
    ) -> SealedRequest:
        """Seals ``body`` (the whole OpenAI request, whose ``model`` and ``stream`` equal the
        clear ones) for ``path``, at ``seq`` (default the channel's next number). A number is
        sealed at most once, and only above every number sealed before: it is the nonce.
        Raises ``ValueError`` on fields the envelope cannot carry."""
        with self._lock:
            number = self._next_seq if seq is None else seq
            _check_fields(path, model, self.session_id, number, policy, max_tokens)
            if number < self._next_seq:
                raise ValueError(f"seq {number}: this channel has sealed up to {self._next_seq - 1}")
            if tier is not None and tier != 4:
                raise ValueError("a sealed request's tier is 4")
            self._next_seq = number + 1
        aad = request_aad(
            path=path,
            model=model,
            session_id=self.session_id,
            stream=stream,
            seq=number,
            suite=self.suite,
            key_id=self.key.key_id,
        )
        ciphertext = self._context.seal_at(number, aad, body)
        envelope: dict[str, Any] = {
            "zml_sealed": SEALED_VERSION,
            "model": model,
            "session_id": self.session_id,
        }
        if tier is not None:
            envelope["tier"] = tier
        if policy is not None:
            envelope["policy"] = policy
        envelope["stream"] = stream
        if max_tokens is not None:
            envelope["max_tokens"] = max_tokens
        envelope.update(
            {
                "suite": self.suite,
                "key_id": self.key.key_id,
                "seq": number,
                "enc": self.enc,
                "ciphertext": b64url(ciphertext),
            }
        )
        return SealedRequest(
            envelope=envelope,
            body=json.dumps(envelope, separators=(",", ":")).encode("utf-8"),
            opener=ResponseOpener(self.aead, self._answer_secret, number),
        )


def new_nonce() -> str:
    """32 random bytes as lowercase hex: a session's REPORTDATA nonce."""
    return secrets.token_hex(32)
