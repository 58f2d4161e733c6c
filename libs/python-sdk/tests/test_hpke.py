"""HPKE against RFC 9180's own vectors (Appendix A, base mode, DHKEM(X25519, HKDF-SHA256),
HKDF-SHA256, AES-128-GCM and ChaCha20-Poly1305): the same file the TypeScript tests read.
Pure unit tests: no gateway."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from zml import _hpke
from zml._hpke import HpkeError

REPO = Path(__file__).resolve().parents[3]
VECTORS = REPO / "libs" / "seal" / "test" / "fixtures" / "rfc9180-x25519-base.txt"

_FIELD = re.compile(r"^([A-Za-z_ ]+):\s*(.*)$")


@dataclass
class Vector:
    setup: dict[str, str]
    encryptions: list[dict[str, str]] = field(default_factory=list)
    exports: list[dict[str, str]] = field(default_factory=list)


def _records(block: list[str]) -> list[dict[str, str]]:
    """``key: value`` records of one ``~~~`` block; values may wrap onto further lines and
    records are separated by blank lines."""
    records: list[dict[str, str]] = []
    current: dict[str, str] = {}
    last: str | None = None
    for line in block:
        if not line.strip():
            if current:
                records.append(current)
            current, last = {}, None
            continue
        m = _FIELD.match(line)
        if m:
            last = m.group(1)
            current[last] = m.group(2).strip()
        elif last is not None:
            current[last] += line.strip()
    if current:
        records.append(current)
    return records


def load_vectors() -> list[Vector]:
    vectors: list[Vector] = []
    section = ""
    block: list[str] | None = None
    for line in VECTORS.read_text().splitlines():
        if line.startswith("~~~"):
            if block is None:
                block = []
                continue
            records = _records(block)
            block = None
            if section == "setup":
                vectors.append(Vector(setup=records[0]))
            elif section == "encryptions":
                vectors[-1].encryptions.extend(records)
            elif section == "exports":
                vectors[-1].exports.extend(records)
            continue
        if block is not None:
            block.append(line)
        elif line.startswith("### Base Setup"):
            section = "setup"
        elif line.startswith("#### Encryptions"):
            section = "encryptions"
        elif line.startswith("#### Exported Values"):
            section = "exports"
    return vectors


VECTOR_LIST = load_vectors()


def h(value: str) -> bytes:
    return bytes.fromhex(value)


def test_the_file_holds_both_suites_of_the_channel() -> None:
    assert sorted(int(v.setup["aead_id"]) for v in VECTOR_LIST) == [1, 3]
    for v in VECTOR_LIST:
        assert (v.setup["mode"], v.setup["kem_id"], v.setup["kdf_id"]) == ("0", "32", "1")
        assert [int(e["sequence number"]) for e in v.encryptions] == [0, 1, 2, 4, 255, 256]
        assert len(v.exports) == 3
        assert v.exports[0]["exporter_context"] == ""


@pytest.fixture(params=VECTOR_LIST, ids=lambda v: f"aead{v.setup['aead_id']}")
def vector(request: pytest.FixtureRequest) -> Vector:
    v: Vector = request.param
    return v


def test_derive_key_pair(vector: Vector) -> None:
    s = vector.setup
    sk_e, pk_e = _hpke.derive_key_pair(h(s["ikmE"]))
    sk_r, pk_r = _hpke.derive_key_pair(h(s["ikmR"]))
    assert _hpke.private_key_bytes(sk_e).hex() == s["skEm"]
    assert pk_e.hex() == s["pkEm"]
    assert _hpke.private_key_bytes(sk_r).hex() == s["skRm"]
    assert pk_r.hex() == s["pkRm"]


def test_encap_decap_and_key_schedule(vector: Vector) -> None:
    s = vector.setup
    suite = _hpke.suite_for_aead(int(s["aead_id"]))
    sk_e, _ = _hpke.derive_key_pair(h(s["ikmE"]))
    sk_r, pk_r = _hpke.derive_key_pair(h(s["ikmR"]))
    shared, enc = _hpke.encap(pk_r, sk_e)
    assert enc.hex() == s["enc"]
    assert shared.hex() == s["shared_secret"]
    assert _hpke.decap(enc, sk_r) == shared
    schedule = _hpke.key_schedule_base(suite, shared, h(s["info"]))
    assert schedule.key_schedule_context.hex() == s["key_schedule_context"]
    assert schedule.secret.hex() == s["secret"]
    assert schedule.key.hex() == s["key"]
    assert schedule.base_nonce.hex() == s["base_nonce"]
    assert schedule.exporter_secret.hex() == s["exporter_secret"]


def test_every_encryption_and_export(vector: Vector) -> None:
    s = vector.setup
    suite = _hpke.suite_for_aead(int(s["aead_id"]))
    sk_e, _ = _hpke.derive_key_pair(h(s["ikmE"]))
    sk_r, pk_r = _hpke.derive_key_pair(h(s["ikmR"]))
    info = h(s["info"])
    enc, sender = _hpke.setup_base_s(pk_r, info, suite=suite, ephemeral=sk_e)
    receiver = _hpke.setup_base_r(enc, sk_r, info, suite=suite)
    assert enc.hex() == s["enc"]
    assert (sender.key.hex(), sender.base_nonce.hex()) == (s["key"], s["base_nonce"])
    assert receiver.exporter_secret.hex() == s["exporter_secret"]
    # Contexts count their own sequence numbers: seal and open every number up to the
    # last vector's, checking the ones the RFC lists.
    by_seq = {int(e["sequence number"]): e for e in vector.encryptions}
    for seq in range(257):
        e = by_seq.get(seq)
        pt = h(e["pt"]) if e else b"\x00"
        aad = h(e["aad"]) if e else b""
        if e:
            assert _hpke.xor_nonce(sender.base_nonce, seq).hex() == e["nonce"]
        ct = sender.seal(aad, pt)
        if e:
            assert ct.hex() == e["ct"], f"seq {seq}"
        assert receiver.open(aad, ct) == pt
    assert sender.seq == receiver.seq == 257
    for x in vector.exports:
        ctx, length = h(x["exporter_context"]), int(x["L"])
        assert sender.export(ctx, length).hex() == x["exported_value"]
        assert receiver.export(ctx, length).hex() == x["exported_value"]


def test_explicit_key_aead_matches_the_context(vector: Vector) -> None:
    s = vector.setup
    suite = _hpke.suite_for_aead(int(s["aead_id"]))
    e = vector.encryptions[0]
    ct = _hpke.aead_seal(suite, h(s["key"]), h(e["nonce"]), h(e["aad"]), h(e["pt"]))
    assert ct.hex() == e["ct"]
    assert _hpke.aead_open(suite, h(s["key"]), h(e["nonce"]), h(e["aad"]), ct) == h(e["pt"])
    with pytest.raises(HpkeError):
        _hpke.aead_open(suite, h(s["key"]), h(e["nonce"]), b"other", ct)


def test_open_refuses_altered_input_and_keeps_its_number(vector: Vector) -> None:
    s = vector.setup
    suite = _hpke.suite_for_aead(int(s["aead_id"]))
    sk_r, pk_r = _hpke.derive_key_pair(h(s["ikmR"]))
    enc, sender = _hpke.setup_base_s(pk_r, b"info", suite=suite)
    receiver = _hpke.setup_base_r(enc, sk_r, b"info", suite=suite)
    ct = sender.seal(b"aad", b"message")
    for bad_aad, bad_ct in [
        (b"aad!", ct),
        (b"aad", ct[:-1] + bytes([ct[-1] ^ 1])),
        (b"aad", bytes([ct[0] ^ 0x80]) + ct[1:]),
        (b"aad", ct[:10]),
    ]:
        with pytest.raises(HpkeError):
            receiver.open(bad_aad, bad_ct)
    assert receiver.seq == 0
    assert receiver.open(b"aad", ct) == b"message"
    # Another info, another key: nothing opens.
    other = _hpke.setup_base_r(enc, sk_r, b"other info", suite=suite)
    with pytest.raises(HpkeError):
        other.open(b"aad", ct)
    # And another recipient key cannot open it.
    stranger, _ = _hpke.derive_key_pair(b"\x01" * 32)
    with pytest.raises(HpkeError):
        _hpke.setup_base_r(enc, stranger, b"info", suite=suite).open(b"aad", ct)


def test_hkdf_matches_rfc5869_case_1() -> None:
    ikm = bytes([0x0B] * 22)
    salt = bytes(range(13))
    info = bytes(range(0xF0, 0xFA))
    prk = _hpke.hkdf_extract(salt, ikm)
    assert prk.hex() == "077709362c2e32df0ddc3f0dc47bba6390b6c73bb50f9c3122ec844ad7c2b3e5"
    okm = _hpke.hkdf_expand(prk, info, 42)
    assert okm.hex() == (
        "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"
    )


def test_hkdf_matches_rfc5869_case_3_empty_salt_and_info() -> None:
    prk = _hpke.hkdf_extract(b"", bytes([0x0B] * 22))
    assert prk.hex() == "19ef24a32c717b167f33a91d6f648bdf96596776afdb6377ac434c1c293ccb04"
    assert _hpke.hkdf_expand(prk, b"", 42).hex() == (
        "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"
    )


def test_low_order_public_key_is_refused() -> None:
    sk, _ = _hpke.derive_key_pair(b"\x02" * 32)
    with pytest.raises(HpkeError):
        _hpke.setup_base_s(bytes(32), b"info")
    with pytest.raises(HpkeError):
        _hpke.decap(bytes(32), sk)
    with pytest.raises(HpkeError):
        _hpke.decap(b"\x01" * 31, sk)
