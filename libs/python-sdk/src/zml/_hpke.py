"""HPKE (RFC 9180), base mode only: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256 and either
ChaCha20-Poly1305 or AES-128-GCM, on the primitives of ``cryptography``.

HKDF-Extract and HKDF-Expand are written out on HMAC-SHA256 (RFC 5869) so that HPKE's
labeled variants (``LabeledExtract``/``LabeledExpand``, RFC 9180 §4) and the sealed channel's
plain ones come from the same two functions. Checked against RFC 9180 Appendix A
(``tests/test_hpke.py``).

>>> sk, pk = derive_key_pair(ikm)
>>> enc, sender = setup_base_s(pk, b"info", suite=CHACHA20POLY1305)
>>> ct = sender.seal(b"aad", b"hello")
>>> setup_base_r(enc, sk, b"info", suite=CHACHA20POLY1305).open(b"aad", ct)
b'hello'
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

MODE_BASE = 0x00
KEM_X25519_HKDF_SHA256 = 0x0020
KDF_HKDF_SHA256 = 0x0001
AEAD_AES_128_GCM = 0x0001
AEAD_CHACHA20_POLY1305 = 0x0003

N_H = 32
"""HKDF-SHA256's output size (``Nh``)."""
N_SECRET = 32
N_ENC = 32
N_PK = 32
N_SK = 32
TAG_BYTES = 16

_VERSION_LABEL = b"HPKE-v1"
_KEM_SUITE_ID = b"KEM" + KEM_X25519_HKDF_SHA256.to_bytes(2, "big")


class HpkeError(Exception):
    """A ciphertext that does not open, a bad key, or a context used beyond its limits."""


@dataclass(frozen=True)
class AeadSuite:
    """One HPKE suite of DHKEM(X25519, HKDF-SHA256) and HKDF-SHA256: its AEAD."""

    aead_id: int
    key_bytes: int
    """``Nk``."""
    nonce_bytes: int
    """``Nn``."""

    @property
    def suite_id(self) -> bytes:
        """``"HPKE" ‖ I2OSP(kem_id, 2) ‖ I2OSP(kdf_id, 2) ‖ I2OSP(aead_id, 2)``."""
        return (
            b"HPKE"
            + KEM_X25519_HKDF_SHA256.to_bytes(2, "big")
            + KDF_HKDF_SHA256.to_bytes(2, "big")
            + self.aead_id.to_bytes(2, "big")
        )


AES128GCM = AeadSuite(aead_id=AEAD_AES_128_GCM, key_bytes=16, nonce_bytes=12)
CHACHA20POLY1305 = AeadSuite(aead_id=AEAD_CHACHA20_POLY1305, key_bytes=32, nonce_bytes=12)


def suite_for_aead(aead_id: int) -> AeadSuite:
    for suite in (AES128GCM, CHACHA20POLY1305):
        if suite.aead_id == aead_id:
            return suite
    raise ValueError(f"unsupported HPKE aead_id {aead_id}")


# --- HKDF (RFC 5869) on HMAC-SHA256 ---------------------------------------------------------


def hkdf_extract(salt: bytes, ikm: bytes) -> bytes:
    """``HKDF-Extract(salt, IKM)``; an empty salt is ``Nh`` zero bytes."""
    return hmac.new(salt or bytes(N_H), ikm, hashlib.sha256).digest()


def hkdf_expand(prk: bytes, info: bytes, length: int) -> bytes:
    """``HKDF-Expand(PRK, info, L)``, ``L`` at most 255 × 32."""
    if not 0 <= length <= 255 * N_H:
        raise ValueError(f"HKDF-Expand length {length} out of range")
    out = b""
    block = b""
    counter = 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        out += block
        counter += 1
    return out[:length]


def labeled_extract(suite_id: bytes, salt: bytes, label: bytes, ikm: bytes) -> bytes:
    return hkdf_extract(salt, _VERSION_LABEL + suite_id + label + ikm)


def labeled_expand(suite_id: bytes, prk: bytes, label: bytes, info: bytes, length: int) -> bytes:
    if length > 0xFFFF:
        raise ValueError("LabeledExpand length does not fit two bytes")
    labeled_info = length.to_bytes(2, "big") + _VERSION_LABEL + suite_id + label + info
    return hkdf_expand(prk, labeled_info, length)


# --- AEAD with an explicit key and nonce ----------------------------------------------------


def aead_cipher(suite: AeadSuite, key: bytes) -> AESGCM | ChaCha20Poly1305:
    """The suite's AEAD under ``key``: one object serves every nonce, so a context or an
    answer makes it once and reuses it for each message."""
    return _cipher(suite, key)


def _cipher(suite: AeadSuite, key: bytes) -> AESGCM | ChaCha20Poly1305:
    if len(key) != suite.key_bytes:
        raise ValueError(f"AEAD key must be {suite.key_bytes} bytes")
    return ChaCha20Poly1305(key) if suite.aead_id == AEAD_CHACHA20_POLY1305 else AESGCM(key)


def aead_seal(suite: AeadSuite, key: bytes, nonce: bytes, aad: bytes, plaintext: bytes) -> bytes:
    """The suite's AEAD: ciphertext ‖ 16-byte tag."""
    if len(nonce) != suite.nonce_bytes:
        raise ValueError(f"AEAD nonce must be {suite.nonce_bytes} bytes")
    return _cipher(suite, key).encrypt(nonce, plaintext, aad)


def aead_open(suite: AeadSuite, key: bytes, nonce: bytes, aad: bytes, ciphertext: bytes) -> bytes:
    """Opens ``aead_seal``'s output; raises :class:`HpkeError` when it does not open."""
    if len(nonce) != suite.nonce_bytes:
        raise ValueError(f"AEAD nonce must be {suite.nonce_bytes} bytes")
    if len(ciphertext) < TAG_BYTES:
        raise HpkeError("ciphertext shorter than the AEAD tag")
    try:
        return _cipher(suite, key).decrypt(nonce, ciphertext, aad)
    except InvalidTag as err:
        raise HpkeError("ciphertext does not open") from err


def xor_nonce(base_nonce: bytes, counter: int) -> bytes:
    """``base_nonce XOR I2OSP(counter, Nn)``."""
    n = len(base_nonce)
    if not 0 <= counter < 1 << (8 * n):
        raise HpkeError("sequence number out of range")
    return (int.from_bytes(base_nonce, "big") ^ counter).to_bytes(n, "big")


# --- DHKEM(X25519, HKDF-SHA256) (RFC 9180 §4.1, §7.1.3) -------------------------------------


def public_key_bytes(key: X25519PrivateKey | X25519PublicKey) -> bytes:
    """The raw 32-byte X25519 public key (``SerializePublicKey``)."""
    public = key.public_key() if isinstance(key, X25519PrivateKey) else key
    return public.public_bytes(Encoding.Raw, PublicFormat.Raw)


def private_key_bytes(key: X25519PrivateKey) -> bytes:
    """The raw 32-byte X25519 private key (``SerializePrivateKey``)."""
    return key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())


def derive_key_pair(ikm: bytes) -> tuple[X25519PrivateKey, bytes]:
    """``DeriveKeyPair(ikm)`` for X25519: the private key and the raw public key."""
    dkp_prk = labeled_extract(_KEM_SUITE_ID, b"", b"dkp_prk", ikm)
    sk = labeled_expand(_KEM_SUITE_ID, dkp_prk, b"sk", b"", N_SK)
    private = X25519PrivateKey.from_private_bytes(sk)
    return private, public_key_bytes(private)


def _dh(private: X25519PrivateKey, public_raw: bytes) -> bytes:
    if len(public_raw) != N_PK:
        raise HpkeError(f"an X25519 public key is {N_PK} bytes")
    try:
        shared = private.exchange(X25519PublicKey.from_public_bytes(public_raw))
    except ValueError as err:  # a low-order point: the shared secret would be zero
        raise HpkeError("X25519 exchange failed") from err
    if shared == bytes(len(shared)):
        raise HpkeError("X25519 exchange gave the all-zero value")
    return shared


def _extract_and_expand(dh: bytes, kem_context: bytes) -> bytes:
    eae_prk = labeled_extract(_KEM_SUITE_ID, b"", b"eae_prk", dh)
    return labeled_expand(_KEM_SUITE_ID, eae_prk, b"shared_secret", kem_context, N_SECRET)


def encap(pk_r: bytes, ephemeral: X25519PrivateKey | None = None) -> tuple[bytes, bytes]:
    """``Encap(pkR)``: (shared_secret, enc). ``ephemeral`` fixes ``skE`` (tests only)."""
    sk_e = ephemeral if ephemeral is not None else X25519PrivateKey.generate()
    dh = _dh(sk_e, pk_r)
    enc = public_key_bytes(sk_e)
    return _extract_and_expand(dh, enc + pk_r), enc


def decap(enc: bytes, sk_r: X25519PrivateKey) -> bytes:
    """``Decap(enc, skR)``: the shared secret."""
    if len(enc) != N_ENC:
        raise HpkeError(f"enc must be {N_ENC} bytes")
    dh = _dh(sk_r, enc)
    return _extract_and_expand(dh, enc + public_key_bytes(sk_r))


# --- Key schedule and contexts (RFC 9180 §5) ------------------------------------------------


@dataclass(frozen=True)
class KeySchedule:
    """What ``KeySchedule`` derives in base mode (the RFC's vectors list every value)."""

    key_schedule_context: bytes
    secret: bytes
    key: bytes
    base_nonce: bytes
    exporter_secret: bytes


def key_schedule_base(suite: AeadSuite, shared_secret: bytes, info: bytes) -> KeySchedule:
    """``KeySchedule(mode_base, shared_secret, info, psk="", psk_id="")``."""
    sid = suite.suite_id
    psk_id_hash = labeled_extract(sid, b"", b"psk_id_hash", b"")
    info_hash = labeled_extract(sid, b"", b"info_hash", info)
    context = bytes([MODE_BASE]) + psk_id_hash + info_hash
    secret = labeled_extract(sid, shared_secret, b"secret", b"")
    return KeySchedule(
        key_schedule_context=context,
        secret=secret,
        key=labeled_expand(sid, secret, b"key", context, suite.key_bytes),
        base_nonce=labeled_expand(sid, secret, b"base_nonce", context, suite.nonce_bytes),
        exporter_secret=labeled_expand(sid, secret, b"exp", context, N_H),
    )


class Context:
    """An HPKE encryption context: the key schedule's values and a sequence number.

    A sender's context seals, a recipient's opens; both export. ``seal``/``open`` count the
    sequence number as the RFC's API does; ``seal_at``/``open_at`` take it explicitly (the
    sealed channel carries it in each request), and never advance the count. Not
    thread-safe: the caller keeps one number to one message.
    """

    def __init__(self, suite: AeadSuite, schedule: KeySchedule) -> None:
        self.suite = suite
        self.schedule = schedule
        self.seq = 0
        self._aead = aead_cipher(suite, schedule.key)

    @property
    def key(self) -> bytes:
        return self.schedule.key

    @property
    def base_nonce(self) -> bytes:
        return self.schedule.base_nonce

    @property
    def exporter_secret(self) -> bytes:
        return self.schedule.exporter_secret

    def _next_nonce(self) -> bytes:
        if self.seq >= (1 << (8 * self.suite.nonce_bytes)) - 1:
            raise HpkeError("message limit reached")
        return xor_nonce(self.base_nonce, self.seq)

    def seal(self, aad: bytes, plaintext: bytes) -> bytes:
        """``Context.Seal(aad, pt)`` with the next sequence number's nonce."""
        ct = aead_seal(self.suite, self.key, self._next_nonce(), aad, plaintext)
        self.seq += 1
        return ct

    def open(self, aad: bytes, ciphertext: bytes) -> bytes:
        """``Context.Open(aad, ct)``; raises :class:`HpkeError`. A failure keeps the number."""
        pt = aead_open(self.suite, self.key, self._next_nonce(), aad, ciphertext)
        self.seq += 1
        return pt

    def seal_at(self, seq: int, aad: bytes, plaintext: bytes) -> bytes:
        """``Seal`` at sequence number ``seq``: its nonce is ``ComputeNonce(seq)``."""
        return self._aead.encrypt(xor_nonce(self.base_nonce, seq), plaintext, aad)

    def open_at(self, seq: int, aad: bytes, ciphertext: bytes) -> bytes:
        """``Open`` at sequence number ``seq``; raises :class:`HpkeError`."""
        if len(ciphertext) < TAG_BYTES:
            raise HpkeError("ciphertext shorter than the AEAD tag")
        try:
            return self._aead.decrypt(xor_nonce(self.base_nonce, seq), ciphertext, aad)
        except InvalidTag as err:
            raise HpkeError("ciphertext does not open") from err

    def export(self, exporter_context: bytes, length: int) -> bytes:
        """``Context.Export(exporter_context, L)``."""
        return labeled_expand(
            self.suite.suite_id, self.exporter_secret, b"sec", exporter_context, length
        )


def setup_base_s(
    pk_r: bytes,
    info: bytes,
    *,
    suite: AeadSuite = CHACHA20POLY1305,
    ephemeral: X25519PrivateKey | None = None,
) -> tuple[bytes, Context]:
    """``SetupBaseS(pkR, info)``: (enc, sender context). ``pk_r`` is the raw 32-byte key;
    ``ephemeral`` fixes the ephemeral key (for test vectors only)."""
    shared_secret, enc = encap(pk_r, ephemeral)
    return enc, Context(suite, key_schedule_base(suite, shared_secret, info))


def setup_base_r(
    enc: bytes, sk_r: X25519PrivateKey, info: bytes, *, suite: AeadSuite = CHACHA20POLY1305
) -> Context:
    """``SetupBaseR(enc, skR, info)``: the recipient context."""
    return Context(suite, key_schedule_base(suite, decap(enc, sk_r), info))
