"""TDX quote verification (``zml._attest``): the real quotes of ``libs/tdx/test/fixtures``
against Intel's root, with the outcomes ``libs/tdx/test/verify.test.ts`` expects (checks
without collateral), and quotes from the repository's test PKI (``tests/make_test_quote.ts``)
against its own root, bound to a session as a tier-4 node binds one. Pure unit tests: no
gateway (the test PKI's quotes come from a Node process, not the stack)."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from _node_helpers import QuoteMaker, quote_maker  # noqa: F401 (the fixture)
from zml import _attest
from zml._attest import (
    INTEL_SGX_ROOT_CA_PEM,
    AttestationResult,
    parse_quote,
    report_data_for,
    verify_quote,
    verify_session_attestation,
)

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "libs" / "tdx" / "test" / "fixtures"
EXPECTED: dict[str, Any] = json.loads((FIXTURES / "expected.json.txt").read_text())["quotes"]

PHALA = "v4-dcap-qvl-phala.bin"
SPR = "v4-go-tdx-guest-spr.bin"
V5 = "v5-go-tdx-guest.bin"
DEBUG = "v4-trustee-debug.bin"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def t(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def verify(quote: bytes | str, at: str, **options: Any) -> AttestationResult:
    return verify_quote(quote, at=t(at), **options)


def test_the_pinned_root_is_intels() -> None:
    assert INTEL_SGX_ROOT_CA_PEM.strip() == (FIXTURES / "intel-sgx-root-ca.pem").read_text().strip()
    root = _attest.load_root(INTEL_SGX_ROOT_CA_PEM)
    der = root.public_bytes(Encoding.DER)
    assert hashlib.sha256(der).hexdigest() == (
        "44a0196b2b99f889b8e149e95b807a350e7424964399e885a7cbb8ccfab674d3"
    )


# --- Real quotes -----------------------------------------------------------------------------


def test_phala_v4_verifies_and_reads_every_field() -> None:
    want = EXPECTED[PHALA]["parsed"]
    r = verify(fixture(PHALA), "2025-07-01T00:00:00Z")
    assert r.failed == [] and r.ok and r.reason is None
    assert [c.name for c in r.checks] == [
        "quote_format",
        "qe_vendor",
        "pck_chain",
        "pck_chain_validity",
        "pck_extension",
        "qe_report_signature",
        "qe_report_data",
        "qe_report_identity",
        "quote_signature",
        "td_debug",
    ]
    q = r.quote
    assert q is not None and (q.version, q.body_type) == (4, 2)
    assert q.trailing_bytes == want["trailingBytesAfterSigData"]
    assert q.user_data == want["userData"] and q.qe_vendor_id == want["qeVendorId"]
    body = q.body
    assert (body.mrtd, body.rtmr0, body.rtmr1, body.rtmr2, body.rtmr3) == (
        want["mrTd"],
        want["rtmr0"],
        want["rtmr1"],
        want["rtmr2"],
        want["rtmr3"],
    )
    assert body.reportdata == want["reportData"] and body.td_attributes == want["tdAttributes"]
    assert (body.xfam, body.tee_tcb_svn, body.mrseam) == (
        want["xfam"],
        want["teeTcbSvn"],
        want["mrSeam"],
    )
    assert q.qe_report.mrsigner == want["qeReport"]["mrSigner"]
    assert q.qe_report.reportdata == want["qeReport"]["reportData"]
    assert q.attestation_key.hex() == want["attestationKey"]
    assert r.pck is not None
    assert (r.pck.serial, r.pck.fmspc, r.pck.pceid, r.pck.pcesvn, r.pck.cpusvn, r.pck.ppid) == (
        want["pck"]["serial"],
        want["pck"]["fmspc"],
        want["pck"]["pceId"],
        want["pck"]["pceSvn"],
        want["pck"]["cpuSvn"],
        want["pck"]["ppid"],
    )
    assert r.expires_at == t("2032-02-06T23:25:51Z")


def test_phala_accepts_hex_and_base64_with_the_same_result() -> None:
    raw = fixture(PHALA)
    binary = verify(raw, "2025-07-01T00:00:00Z")
    for text in [raw.hex(), base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode().rstrip("=")]:
        again = verify(text, "2025-07-01T00:00:00Z")
        assert again.checks == binary.checks and again.quote == binary.quote


def test_spr_v4_verifies_in_2023_and_fails_once_the_pck_expired() -> None:
    want = EXPECTED[SPR]["parsed"]
    r = verify(fixture(SPR), "2023-07-01T01:00:00Z")
    assert r.failed == []
    assert r.quote is not None and r.quote.body.mrtd == want["mrTd"]
    assert r.quote.body.reportdata == want["reportData"]
    assert r.pck is not None and r.pck.fmspc == want["pck"]["fmspc"]
    late = verify(fixture(SPR), "2053-07-01T01:00:00Z")
    assert late.failed == ["pck_chain_validity"]
    assert late.reason is not None and "expired at 2029-09-20T13:20:31Z" in late.reason


@pytest.mark.parametrize(
    "case", EXPECTED[SPR]["negativeMutations"]["cases"], ids=lambda c: f"{c['offset']}->{c['value']}"
)
def test_go_tdx_guest_mutations_fail(case: dict[str, Any]) -> None:
    data = bytearray(fixture(SPR))
    data[case["offset"]] = case["value"]
    assert not verify(bytes(data), "2023-07-01T01:00:00Z").ok


def test_v5_td_report_15_verifies_from_its_pck_not_before() -> None:
    want = EXPECTED[V5]["parsed"]
    r = verify(fixture(V5), "2026-02-03T01:00:00Z")
    assert r.failed == [] and r.quote is not None
    assert (r.quote.version, r.quote.body_type) == (5, 3)
    assert len(r.quote.signed_region) == 702
    assert r.quote.body.mrtd == want["mrTd"] and r.quote.body.reportdata == want["reportData"]
    assert r.quote.body.tee_tcb_svn_2 == want["teeTcbSvn2"]
    assert r.quote.body.mrservicetd == want["mrServiceTd"]
    check = r.check("mrservicetd")
    assert check is not None and check.ok
    assert verify(fixture(V5), "2026-01-27T14:36:27Z").ok  # bounds inclusive
    for at in ["2026-01-27T14:36:26Z", "2023-07-01T01:00:00Z"]:
        early = verify(fixture(V5), at)
        assert early.failed == ["pck_chain_validity"]
        assert early.reason is not None and "not valid before 2026-01-27T14:36:27Z" in early.reason


def test_a_debug_td_is_refused_unless_allowed() -> None:
    r = verify(fixture(DEBUG), "2024-07-01T00:00:00Z")
    assert r.failed == ["td_debug"]
    assert r.reason is not None and "DEBUG set" in r.reason
    assert r.quote is not None and r.quote.body.td_attributes == "0100001000000000"
    assert verify(fixture(DEBUG), "2024-07-01T00:00:00Z", allow_debug=True).ok


def test_flipping_any_byte_of_the_signed_structure_fails() -> None:
    data = fixture(PHALA)
    parsed = EXPECTED[PHALA]["parsed"]
    pem_at = parsed["qeReportOffset"] + 384 + 64 + 2 + parsed["qeAuthDataLen"] + 6
    for offset in range(0, pem_at, 7):
        copy = bytearray(data)
        copy[offset] ^= 0x80
        assert not verify(bytes(copy), "2025-07-01T00:00:00Z").ok, f"offset {offset}"
    text = data.decode("latin-1")
    pems = parse_quote(data).pck_chain_pem
    for i, extra in [(0, 200), (0, 700), (1, 300), (2, 300)]:
        offset = text.index(pems[i]) + extra
        copy = bytearray(data)
        copy[offset] ^= 0x01
        assert not verify(bytes(copy), "2025-07-01T00:00:00Z").ok, f"cert {i} offset {offset}"


def test_bytes_after_the_signature_data_are_ignored() -> None:
    copy = bytearray(fixture(PHALA))
    copy[EXPECTED[PHALA]["parsed"]["sigDataEnd"] + 3] = 0x55
    assert verify(bytes(copy), "2025-07-01T00:00:00Z").ok


def test_measurement_policy() -> None:
    want = EXPECTED[PHALA]["parsed"]
    approved = {
        "id": "phala-dstack",
        "mrtd": want["mrTd"],
        "rtmr0": want["rtmr0"],
        "rtmr1": want["rtmr1"],
        "rtmr2": want["rtmr2"],
        "rtmr3": want["rtmr3"],
    }
    at = "2025-07-01T00:00:00Z"
    r = verify(fixture(PHALA), at, approved_measurements=[approved])
    assert r.ok and r.matched_measurement_set == "phala-dstack"
    other = {**approved, "id": None, "rtmr3": "11" * 48}
    upper = {"mrtd": want["mrTd"].upper(), "rtmr1": want["rtmr1"].upper()}
    r = verify(fixture(PHALA), at, approved_measurements=[other, upper])
    assert r.ok and r.matched_measurement_set == "#1"
    for sets in [[{**approved, "rtmr2": "00" * 48}], [{"mrtd": "ab" * 48}], []]:
        r = verify(fixture(PHALA), at, approved_measurements=sets)
        assert r.failed == ["measurements"] and r.matched_measurement_set is None


def test_report_data_is_compared_exactly() -> None:
    want: str = EXPECTED[PHALA]["parsed"]["reportData"]
    at = "2025-07-01T00:00:00Z"
    assert verify(fixture(PHALA), at, expected_report_data=want).ok
    assert verify(fixture(PHALA), at, expected_report_data=bytes.fromhex(want)).ok
    off = want[:-1] + ("1" if want.endswith("0") else "0")
    assert verify(fixture(PHALA), at, expected_report_data=off).failed == ["report_data"]


def test_a_chain_to_another_root_fails_pck_chain() -> None:
    other_root = parse_quote(fixture(PHALA)).pck_chain_pem[1]
    r = verify(fixture(PHALA), "2025-07-01T00:00:00Z", trusted_root_pem=other_root)
    assert r.failed == ["pck_chain"]
    assert r.reason is not None and "not the pinned root" in r.reason


def test_garbage_is_a_failed_check_and_programmer_errors_raise() -> None:
    garbage = verify(b"\x01\x02\x03", "2025-07-01T00:00:00Z")
    assert garbage.failed == ["quote_format"] and garbage.quote is None and not garbage.ok
    assert verify("", "2025-07-01T00:00:00Z").failed == ["quote_format"]
    assert verify("not a quote!", "2025-07-01T00:00:00Z").failed == ["quote_format"]
    data = fixture(PHALA)
    with pytest.raises(ValueError):
        verify(data, "2025-07-01T00:00:00Z", trusted_root_pem="nope")
    with pytest.raises(ValueError):
        verify(data, "2025-07-01T00:00:00Z", expected_report_data="abcd")
    with pytest.raises(ValueError):
        verify(data, "2025-07-01T00:00:00Z", approved_measurements=[{"mrtd": "zz"}])
    with pytest.raises(ValueError):
        verify(data, "2025-07-01T00:00:00Z", approved_measurements=[{"rtmr0": "00" * 48}])
    with pytest.raises(ValueError):  # a misspelt field would otherwise pin nothing
        verify(data, "2025-07-01T00:00:00Z", approved_measurements=[{"mrtd": "00" * 48, "rtrm3": ""}])


# --- ZML's REPORTDATA binding ----------------------------------------------------------------


def test_report_data_for_is_the_nonce_then_the_hash_of_both_keys() -> None:
    nonce, tls, session = "ab" * 32, "cd" * 32, "ef" * 32
    keys = hashlib.sha256(
        b"zml.tdx.report-data.v1\x00" + bytes.fromhex(tls) + bytes.fromhex(session)
    ).hexdigest()
    assert report_data_for(nonce, tls, session) == nonce + keys
    assert report_data_for(nonce.upper(), tls, session) == nonce + keys
    assert report_data_for(nonce, tls) == report_data_for(nonce, tls, "00" * 32)
    for bad in [("ab", tls, None), (nonce, "zz" * 32, None), (nonce, tls, "00")]:
        with pytest.raises(ValueError):
            report_data_for(*bad)


def test_report_data_for_agrees_with_typescript(quote_maker: QuoteMaker) -> None:
    q = quote_maker.make()
    assert report_data_for(q["nonce"], q["tls_key_sha256"], q["session_key_sha256"]) == q["report_data"]
    assert parse_quote(q["quote_b64"]).body.reportdata == q["report_data"]


# --- Quotes from the repository's test PKI ---------------------------------------------------

MEASUREMENT = {"mrtd": "a1" * 48, "rtmr3": "b3" * 48}


def session_key_b64() -> str:
    der = X25519PrivateKey.generate().public_key().public_bytes(
        Encoding.DER, PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(der).decode()


def attestation_of(q: dict[str, Any], **changes: Any) -> dict[str, Any]:
    answer = {
        "quote_b64": q["quote_b64"],
        "nonce_hex": q["nonce"],
        "session_public_key": q["session_public_key"],
        "tls_key_sha256": q["tls_key_sha256"],
    }
    answer.update(changes)
    return answer


def check_session(
    q: dict[str, Any], *, nonce: str | None = None, root: str | None = None, **changes: Any
) -> AttestationResult:
    return verify_session_attestation(
        attestation_of(q, **changes),
        nonce=nonce or q["nonce"],
        approved_measurements=[MEASUREMENT],
        trusted_root_pem=root or q["root_pem"],
    )


def test_a_test_pki_quote_verifies_against_the_test_root_only(quote_maker: QuoteMaker) -> None:
    q = quote_maker.make()
    r = verify_quote(
        q["quote_b64"],
        trusted_root_pem=q["root_pem"],
        approved_measurements=[MEASUREMENT],
        expected_report_data=q["report_data"],
    )
    assert r.failed == [] and r.ok
    assert r.pck is not None and r.pck.fmspc == "00906ed50000"
    intel = verify_quote(q["quote_b64"])
    assert intel.failed == ["pck_chain"]


def test_a_bound_session_verifies(quote_maker: QuoteMaker) -> None:
    key = session_key_b64()
    q = quote_maker.make(session_public_key=key)
    r = check_session(q)
    assert r.ok, r.reason
    assert r.failed == []
    assert [c.name for c in r.checks][-4:] == ["measurements", "report_data", "nonce", "session_key"]
    assert r.matched_measurement_set == "#0"


def test_a_session_answer_for_another_nonce_fails(quote_maker: QuoteMaker) -> None:
    q = quote_maker.make()
    mine = "77" * 32
    # The gateway passes off an older quote (another nonce) as the answer to mine.
    r = check_session(q, nonce=mine)
    assert r.failed == ["report_data", "nonce"]
    # ... or claims my nonce, though the quote binds another.
    r = check_session(q, nonce=mine, nonce_hex=mine)
    assert r.failed == ["report_data"]


def test_a_session_key_the_quote_does_not_bind_fails(quote_maker: QuoteMaker) -> None:
    q = quote_maker.make()
    r = check_session(q, session_public_key=session_key_b64())
    assert r.failed == ["report_data"]
    r = check_session(q, session_public_key=base64.b64encode(bytes(44)).decode())
    assert r.failed == ["session_key", "report_data"]


def test_a_tls_key_the_quote_does_not_bind_fails(quote_maker: QuoteMaker) -> None:
    q = quote_maker.make()
    assert check_session(q, tls_key_sha256="00" * 32).failed == ["report_data"]
    assert check_session(q, tls_key_sha256=None).failed == ["report_data"]
    assert check_session(q, quote_b64=None).failed == ["report_data"]


def test_a_debug_td_fails(quote_maker: QuoteMaker) -> None:
    assert check_session(quote_maker.make(debug=True)).failed == ["td_debug"]


def test_an_unapproved_measurement_fails(quote_maker: QuoteMaker) -> None:
    assert check_session(quote_maker.make(mrtd="c4" * 48)).failed == ["measurements"]
    assert check_session(quote_maker.make(rtmr3="00" * 48)).failed == ["measurements"]


def test_a_chain_to_another_root_fails(quote_maker: QuoteMaker) -> None:
    q = quote_maker.make(pki="other")
    main_root = quote_maker.make()["root_pem"]
    assert q["root_pem"] != main_root
    r = check_session(q, root=main_root)
    assert r.failed == ["pck_chain"]
    assert r.reason is not None and "not the pinned root" in r.reason
    assert check_session(q, root=INTEL_SGX_ROOT_CA_PEM).failed == ["pck_chain"]


def test_an_expired_pck_chain_fails(quote_maker: QuoteMaker) -> None:
    q = quote_maker.make(pki="expired")
    assert check_session(q).failed == ["pck_chain_validity"]


def test_a_quote_of_another_report_data_fails(quote_maker: QuoteMaker) -> None:
    q = quote_maker.make(report_data="00" * 64)
    assert check_session(q).failed == ["report_data"]


def test_random_corruption_never_raises_and_never_passes_a_changed_signed_part() -> None:
    import random

    data = fixture(PHALA)
    parsed = parse_quote(data)
    rng = random.Random(2024)
    for _ in range(400):
        copy = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            copy[rng.randrange(len(copy))] = rng.randrange(256)
        r = verify(bytes(copy), "2025-07-01T00:00:00Z")  # must not raise
        if r.ok:
            assert r.quote is not None
            assert r.quote.signed_region == parsed.signed_region
            assert r.quote.qe_report_bytes == parsed.qe_report_bytes
