"""Verification of a tier-4 node's Intel TDX quote (v4, and v5 with TD report 1.0 or 1.5), on
``cryptography`` alone: a port of the logic of ``libs/tdx`` (``verifyQuote``) and of the
TypeScript SDK's ``verifyNodeAttestation``, for what a client checks before it seals anything
to a session key.

Checked (each a named check in the result, in this order):

- ``quote_format``: the layout parses (header, body, signature data, certification data
  types 6 and 5, every size field consistent); ECDSA P-256 key, TEE type TDX;
- ``qe_vendor``: Intel's QE vendor id;
- ``pck_chain``: the PEM chain in the quote is PCK leaf → PCK Platform/Processor CA → root,
  the root byte-identical to the trust anchor (Intel SGX Root CA unless the caller gives
  another), each certificate signed by the next, CA flags and P-256 keys as Intel issues them;
- ``pck_chain_validity``: every certificate valid at the verification time;
- ``pck_extension``: the PCK certificate's SGX extension reads (FMSPC, PCE id, SVNs);
- ``qe_report_signature``: the QE report is signed by the PCK leaf key;
- ``qe_report_data``: QE REPORTDATA = SHA-256(attestation key ‖ QE auth data) ‖ 32 zero bytes;
- ``qe_report_identity``: the QE is Intel's TD-QE (MRSIGNER, ISVPRODID 2), not a debug enclave;
- ``quote_signature``: header (+ v5 descriptor) + TD report signed by the attestation key;
- ``td_debug``: not a debug TD (TD_ATTRIBUTES bit 0);
- ``mrservicetd`` (TD report 1.5 only): no service TD bound;
- ``measurements``: an approved measurement set matches (MRTD and any RTMR/other field the
  set gives; hex compared case-insensitively);
- ``report_data``: REPORTDATA equals the expected 64 bytes, for a session
  ``nonce ‖ SHA-256("zml.tdx.report-data.v1" ‖ 0x00 ‖ tls_key_sha256 ‖ session_key_sha256)``.

NOT checked: Intel collateral (TCB info, QE identity, PCK and root CRLs), so neither the
platform's TCB level/status (up to date or not, security advisories) nor PCK revocation. A
quote that passes proves a genuine TDX platform with a PCK chain valid at the time, running
the approved TD, bound to the caller's nonce and keys; for TCB status and revocation check the
quote with Intel DCAP tooling or the gateway's attestation service (``tcb_status``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID

INTEL_SGX_ROOT_CA_PEM = """-----BEGIN CERTIFICATE-----
MIICjzCCAjSgAwIBAgIUImUM1lqdNInzg7SVUr9QGzknBqwwCgYIKoZIzj0EAwIw
aDEaMBgGA1UEAwwRSW50ZWwgU0dYIFJvb3QgQ0ExGjAYBgNVBAoMEUludGVsIENv
cnBvcmF0aW9uMRQwEgYDVQQHDAtTYW50YSBDbGFyYTELMAkGA1UECAwCQ0ExCzAJ
BgNVBAYTAlVTMB4XDTE4MDUyMTEwNDUxMFoXDTQ5MTIzMTIzNTk1OVowaDEaMBgG
A1UEAwwRSW50ZWwgU0dYIFJvb3QgQ0ExGjAYBgNVBAoMEUludGVsIENvcnBvcmF0
aW9uMRQwEgYDVQQHDAtTYW50YSBDbGFyYTELMAkGA1UECAwCQ0ExCzAJBgNVBAYT
AlVTMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEC6nEwMDIYZOj/iPWsCzaEKi7
1OiOSLRFhWGjbnBVJfVnkY4u3IjkDYYL0MxO4mqsyYjlBalTVYxFP2sJBK5zlKOB
uzCBuDAfBgNVHSMEGDAWgBQiZQzWWp00ifODtJVSv1AbOScGrDBSBgNVHR8ESzBJ
MEegRaBDhkFodHRwczovL2NlcnRpZmljYXRlcy50cnVzdGVkc2VydmljZXMuaW50
ZWwuY29tL0ludGVsU0dYUm9vdENBLmRlcjAdBgNVHQ4EFgQUImUM1lqdNInzg7SV
Ur9QGzknBqwwDgYDVR0PAQH/BAQDAgEGMBIGA1UdEwEB/wQIMAYBAf8CAQEwCgYI
KoZIzj0EAwIDSQAwRgIhAOW/5QkR+S9CiSDcNoowLuPRLsWGf/Yi7GSX94BgwTwg
AiEA4J0lrHoMs+Xo5o/sX6O9QWxHRAvZUGOdRQ7cvqRXaqI=
-----END CERTIFICATE-----
"""
"""The Intel SGX Provisioning Certification Root CA (public; SHA-256 of its DER
``44a0196b…b674d3``, valid 2018-05-21 → 2049-12-31), the default trust anchor: the root a
quote carries is never trusted for itself."""

REPORT_DATA_DOMAIN = b"zml.tdx.report-data.v1"
ATT_KEY_TYPE_ECDSA_P256 = 2
TEE_TYPE_TDX = 0x81
INTEL_QE_VENDOR_ID = "939a7233f79c4ca9940a0db3957f0607"
INTEL_TD_QE_MRSIGNER = "dc9e2a7c6f948f17474e34a7fc43ed030f7c1563f1babddf6340c82e0e54a8c5"
TD_QE_ISVPRODID = 2
MAX_QUOTE_BYTES = 64 * 1024

_HEADER_SIZE = 48
_V5_DESCRIPTOR_SIZE = 6
_TD_REPORT_10_SIZE = 584
_TD_REPORT_15_SIZE = 648
_QE_REPORT_SIZE = 384
_CERT_DATA_QE_REPORT = 6
_CERT_DATA_PCK_CHAIN = 5
_SGX_EXTENSION_OID = "1.2.840.113741.1.13.1"
_PCK_NAMES: tuple[tuple[str, ...], ...] = (
    ("Intel SGX PCK Certificate",),
    ("Intel SGX PCK Platform CA", "Intel SGX PCK Processor CA"),
    ("Intel SGX Root CA",),
)
_PEM_BLOCK = re.compile(r"-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----")

MEASUREMENT_FIELDS: dict[str, int] = {
    "mrtd": 48,
    "rtmr0": 48,
    "rtmr1": 48,
    "rtmr2": 48,
    "rtmr3": 48,
    "mrconfigid": 48,
    "mrowner": 48,
    "mrownerconfig": 48,
    "mrseam": 48,
    "xfam": 8,
    "td_attributes": 8,
}
"""Fields an approved measurement set may pin, with their sizes in bytes."""


# --- Parsing ---------------------------------------------------------------------------------


class QuoteParseError(ValueError):
    """The bytes are not a TDX quote v4/v5 of the supported kind; ``field`` names where."""

    def __init__(self, field_name: str, offset: int | None, message: str) -> None:
        where = f" at offset {offset}" if offset is not None else ""
        super().__init__(f"{field_name}{where}: {message}")
        self.field = field_name
        self.offset = offset


@dataclass(frozen=True)
class TdReportBody:
    """The TD report (1.0; the last two fields only in 1.5), byte fields as lowercase hex."""

    tee_tcb_svn: str
    mrseam: str
    mrsignerseam: str
    seam_attributes: str
    td_attributes: str
    xfam: str
    mrtd: str
    mrconfigid: str
    mrowner: str
    mrownerconfig: str
    rtmr0: str
    rtmr1: str
    rtmr2: str
    rtmr3: str
    reportdata: str
    tee_tcb_svn_2: str | None
    mrservicetd: str | None


@dataclass(frozen=True)
class QeReport:
    cpusvn: str
    miscselect: int
    attributes: str
    mrenclave: str
    mrsigner: str
    isvprodid: int
    isvsvn: int
    reportdata: str


@dataclass(frozen=True)
class TdxQuote:
    version: int
    att_key_type: int
    tee_type: int
    qe_vendor_id: str
    user_data: str
    body_type: int
    """2 = TD report 1.0 (584 bytes), 3 = TD report 1.5 (648 bytes)."""
    body: TdReportBody
    signed_region: bytes = field(repr=False)
    """Header (+ v5 descriptor) + body: what the attestation key signs."""
    signature: bytes = field(repr=False)
    attestation_key: bytes = field(repr=False)
    qe_report_bytes: bytes = field(repr=False)
    qe_report: QeReport
    qe_report_signature: bytes = field(repr=False)
    qe_auth_data: bytes = field(repr=False)
    pck_chain_pem: list[str] = field(repr=False)
    """The PEM blocks of the certification data, leaf first."""
    trailing_bytes: int


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def need(self, name: str, offset: int, size: int) -> None:
        if offset < 0 or size < 0 or offset + size > len(self.data):
            left = max(0, len(self.data) - offset)
            raise QuoteParseError(name, offset, f"needs {size} bytes but the quote has {left} left")

    def u16(self, name: str, offset: int) -> int:
        self.need(name, offset, 2)
        return int.from_bytes(self.data[offset : offset + 2], "little")

    def u32(self, name: str, offset: int) -> int:
        self.need(name, offset, 4)
        return int.from_bytes(self.data[offset : offset + 4], "little")

    def take(self, name: str, offset: int, size: int) -> bytes:
        self.need(name, offset, size)
        return self.data[offset : offset + size]


def decode_quote_input(quote: bytes | str) -> bytes:
    """Raw bytes, or text: hex (optionally ``0x``), base64 or base64url; whitespace ignored."""
    if isinstance(quote, (bytes, bytearray, memoryview)):
        data = bytes(quote)
    else:
        text = re.sub(r"\s+", "", quote)
        if text[:2] in ("0x", "0X"):
            text = text[2:]
        if not text:
            raise QuoteParseError("input", None, "empty input")
        if len(text) > MAX_QUOTE_BYTES * 3:
            raise QuoteParseError("input", None, "too large")
        try:
            if re.fullmatch(r"[0-9a-fA-F]+", text):
                data = bytes.fromhex(text)
            elif re.fullmatch(r"[A-Za-z0-9+/]*={0,2}", text) and len(text) % 4 == 0:
                data = base64.b64decode(text, validate=True)
            elif re.fullmatch(r"[A-Za-z0-9_-]*", text) and len(text) % 4 != 1:
                data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            else:
                raise QuoteParseError("input", None, "text input is neither hex nor base64")
        except (ValueError, binascii.Error) as err:
            if isinstance(err, QuoteParseError):
                raise
            raise QuoteParseError("input", None, f"cannot decode: {err}") from err
    if len(data) > MAX_QUOTE_BYTES:
        raise QuoteParseError("input", None, f"{len(data)} bytes exceeds {MAX_QUOTE_BYTES}")
    return data


def parse_quote(quote: bytes | str) -> TdxQuote:
    """Parses a TDX quote v4 or v5 (layout: Intel's TDX DCAP Quoting Library API, A.3).
    Enforces the format selectors and that every size field agrees with the data; bytes
    after the signature data are ignored. Raises :class:`QuoteParseError` only."""
    try:
        return _parse(decode_quote_input(quote))
    except QuoteParseError:
        raise
    except Exception as err:  # a defect must still surface as a parse error
        raise QuoteParseError("quote", None, f"unexpected parser failure: {err}") from err


def _parse(data: bytes) -> TdxQuote:
    r = _Reader(data)
    r.need("header", 0, _HEADER_SIZE)
    version = r.u16("version", 0)
    if version not in (4, 5):
        raise QuoteParseError("version", 0, f"unsupported quote version {version} (need 4 or 5)")
    att_key_type = r.u16("att_key_type", 2)
    if att_key_type != ATT_KEY_TYPE_ECDSA_P256:
        raise QuoteParseError("att_key_type", 2, f"unsupported key type {att_key_type} (need 2)")
    tee_type = r.u32("tee_type", 4)
    if tee_type != TEE_TYPE_TDX:
        raise QuoteParseError("tee_type", 4, f"0x{tee_type:x} is not TDX (0x81)")
    body_type, body_offset, body_size = 2, _HEADER_SIZE, _TD_REPORT_10_SIZE
    if version == 5:
        body_type = r.u16("body_type", 48)
        size = r.u32("body_size", 50)
        if body_type not in (2, 3):
            raise QuoteParseError("body_type", 48, f"body type {body_type} is not a TD report")
        expected = _TD_REPORT_10_SIZE if body_type == 2 else _TD_REPORT_15_SIZE
        if size != expected:
            raise QuoteParseError("body_size", 50, f"{size} for body type {body_type} (need {expected})")
        body_offset, body_size = _HEADER_SIZE + _V5_DESCRIPTOR_SIZE, size
    r.need("body", body_offset, body_size)
    body = _parse_body(r, body_offset, body_type)

    sig_start = body_offset + body_size
    sig_len = r.u32("sig_data_len", sig_start)
    sig = sig_start + 4
    r.need("signature_data", sig, sig_len)
    sig_end = sig + sig_len
    signature = r.take("signature", sig, 64)
    attestation_key = r.take("attestation_key", sig + 64, 64)
    cert_type = r.u16("cert_data_type", sig + 128)
    if cert_type != _CERT_DATA_QE_REPORT:
        raise QuoteParseError("cert_data_type", sig + 128, f"{cert_type} (need 6)")
    cert_size = r.u32("cert_data_size", sig + 130)
    cert = sig + 134
    if 134 + cert_size != sig_len:
        raise QuoteParseError(
            "cert_data_size", sig + 130, f"{cert_size} disagrees with sig_data_len {sig_len}"
        )
    qe_report_bytes = r.take("qe_report", cert, _QE_REPORT_SIZE)
    qe_report_signature = r.take("qe_report_signature", cert + 384, 64)
    auth_len = r.u16("qe_auth_data_len", cert + 448)
    qe_auth_data = r.take("qe_auth_data", cert + 450, auth_len)
    inner_at = cert + 450 + auth_len
    inner_type = r.u16("pck_cert_data_type", inner_at)
    if inner_type != _CERT_DATA_PCK_CHAIN:
        raise QuoteParseError("pck_cert_data_type", inner_at, f"{inner_type} (need 5, PEM chain)")
    pem_size = r.u32("pck_cert_data_size", inner_at + 2)
    pem_at = inner_at + 6
    if pem_at + pem_size != cert + cert_size:
        raise QuoteParseError(
            "pck_cert_data_size", inner_at + 2, f"{pem_size} disagrees with cert_data_size {cert_size}"
        )
    pem_text = r.take("pck_cert_chain", pem_at, pem_size).decode("latin-1")
    return TdxQuote(
        version=version,
        att_key_type=att_key_type,
        tee_type=tee_type,
        qe_vendor_id=r.take("qe_vendor_id", 12, 16).hex(),
        user_data=r.take("user_data", 28, 20).hex(),
        body_type=body_type,
        body=body,
        signed_region=data[:sig_start],
        signature=signature,
        attestation_key=attestation_key,
        qe_report_bytes=qe_report_bytes,
        qe_report=_parse_qe_report(qe_report_bytes),
        qe_report_signature=qe_report_signature,
        qe_auth_data=qe_auth_data,
        pck_chain_pem=_PEM_BLOCK.findall(pem_text),
        trailing_bytes=len(data) - sig_end,
    )


def _parse_body(r: _Reader, at: int, body_type: int) -> TdReportBody:
    def hexof(name: str, offset: int, size: int) -> str:
        return r.take(name, at + offset, size).hex()

    return TdReportBody(
        tee_tcb_svn=hexof("tee_tcb_svn", 0, 16),
        mrseam=hexof("mrseam", 16, 48),
        mrsignerseam=hexof("mrsignerseam", 64, 48),
        seam_attributes=hexof("seam_attributes", 112, 8),
        td_attributes=hexof("td_attributes", 120, 8),
        xfam=hexof("xfam", 128, 8),
        mrtd=hexof("mrtd", 136, 48),
        mrconfigid=hexof("mrconfigid", 184, 48),
        mrowner=hexof("mrowner", 232, 48),
        mrownerconfig=hexof("mrownerconfig", 280, 48),
        rtmr0=hexof("rtmr0", 328, 48),
        rtmr1=hexof("rtmr1", 376, 48),
        rtmr2=hexof("rtmr2", 424, 48),
        rtmr3=hexof("rtmr3", 472, 48),
        reportdata=hexof("reportdata", 520, 64),
        tee_tcb_svn_2=hexof("tee_tcb_svn_2", 584, 16) if body_type == 3 else None,
        mrservicetd=hexof("mrservicetd", 600, 48) if body_type == 3 else None,
    )


def _parse_qe_report(report: bytes) -> QeReport:
    return QeReport(
        cpusvn=report[0:16].hex(),
        miscselect=int.from_bytes(report[16:20], "little"),
        attributes=report[48:64].hex(),
        mrenclave=report[64:96].hex(),
        mrsigner=report[128:160].hex(),
        isvprodid=int.from_bytes(report[256:258], "little"),
        isvsvn=int.from_bytes(report[258:260], "little"),
        reportdata=report[320:384].hex(),
    )


# --- Minimal DER, for the PCK certificate's SGX extension ------------------------------------


class _DerError(ValueError):
    pass


def _der_read(data: bytes, at: int) -> tuple[int, bytes, int]:
    """(tag, contents, next offset) of the TLV at ``at``; definite lengths only."""
    if at + 2 > len(data):
        raise _DerError("truncated DER")
    tag, first = data[at], data[at + 1]
    at += 2
    if first < 0x80:
        length = first
    else:
        count = first & 0x7F
        if count == 0 or count > 4 or at + count > len(data):
            raise _DerError("bad DER length")
        length = int.from_bytes(data[at : at + count], "big")
        at += count
    if at + length > len(data):
        raise _DerError("DER value runs past its container")
    return tag, data[at : at + length], at + length


def _der_children(contents: bytes) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    at = 0
    while at < len(contents):
        tag, value, at = _der_read(contents, at)
        out.append((tag, value))
    return out


def _der_oid(contents: bytes) -> str:
    if not contents:
        raise _DerError("empty OBJECT IDENTIFIER")
    arcs: list[int] = []
    value = 0
    for byte in contents:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    if contents[-1] & 0x80:
        raise _DerError("truncated OBJECT IDENTIFIER")
    first = arcs[0]
    head = [0, first] if first < 40 else [1, first - 40] if first < 80 else [2, first - 80]
    return ".".join(str(a) for a in head + arcs[1:])


_SEQUENCE, _INTEGER, _OCTETS, _OID = 0x30, 0x02, 0x04, 0x06


def _sgx_fields(contents: bytes) -> dict[str, tuple[int, bytes]]:
    """SGX extension values are SEQUENCE OF SEQUENCE {OID, value}, keyed here by OID."""
    out: dict[str, tuple[int, bytes]] = {}
    for tag, item in _der_children(contents):
        if tag != _SEQUENCE:
            raise _DerError("SGX extension: expected a SEQUENCE")
        parts = _der_children(item)
        if len(parts) < 2 or parts[0][0] != _OID:
            raise _DerError("SGX extension: expected {OID, value}")
        out[_der_oid(parts[0][1])] = parts[1]
    return out


def _int_field(fields: dict[str, tuple[int, bytes]], oid: str) -> int:
    tag, value = fields.get(oid, (0, b""))
    if tag != _INTEGER or not 1 <= len(value) <= 4 or value[0] & 0x80:
        raise _DerError(f"SGX extension: {oid} is not a small non-negative INTEGER")
    return int.from_bytes(value, "big")


def _octet_field(fields: dict[str, tuple[int, bytes]], oid: str, size: int) -> str:
    tag, value = fields.get(oid, (0, b""))
    if tag != _OCTETS or len(value) != size:
        raise _DerError(f"SGX extension: {oid} is not a {size}-byte OCTET STRING")
    return value.hex()


@dataclass(frozen=True)
class PckInfo:
    """What the PCK certificate says about the platform."""

    serial: str
    """Uppercase hex."""
    not_before: datetime
    not_after: datetime
    fmspc: str
    pceid: str
    pcesvn: int
    cpusvn: str
    sgx_tcb_components: list[int]
    ppid: str


def _pck_info(leaf: x509.Certificate) -> PckInfo:
    try:
        ext = leaf.extensions.get_extension_for_oid(x509.ObjectIdentifier(_SGX_EXTENSION_OID))
    except x509.ExtensionNotFound:
        raise _DerError("PCK certificate has no SGX extension") from None
    value = ext.value
    raw = value.value if isinstance(value, x509.UnrecognizedExtension) else b""
    tag, contents, end = _der_read(raw, 0)
    if tag != _SEQUENCE or end != len(raw):
        raise _DerError("SGX extension: not a single SEQUENCE")
    fields = _sgx_fields(contents)
    tcb_tag, tcb = fields.get(f"{_SGX_EXTENSION_OID}.2", (0, b""))
    if tcb_tag != _SEQUENCE:
        raise _DerError("SGX extension: missing TCB")
    tcb_fields = _sgx_fields(tcb)
    serial = f"{leaf.serial_number:X}"
    return PckInfo(
        serial=serial if len(serial) % 2 == 0 else "0" + serial,
        not_before=_utc(leaf.not_valid_before),
        not_after=_utc(leaf.not_valid_after),
        fmspc=_octet_field(fields, f"{_SGX_EXTENSION_OID}.4", 6),
        pceid=_octet_field(fields, f"{_SGX_EXTENSION_OID}.3", 2),
        pcesvn=_int_field(tcb_fields, f"{_SGX_EXTENSION_OID}.2.17"),
        cpusvn=_octet_field(tcb_fields, f"{_SGX_EXTENSION_OID}.2.18", 16),
        sgx_tcb_components=[
            _int_field(tcb_fields, f"{_SGX_EXTENSION_OID}.2.{c}") for c in range(1, 17)
        ],
        ppid=_octet_field(fields, f"{_SGX_EXTENSION_OID}.1", 16),
    )


# --- Certificates ----------------------------------------------------------------------------


def _utc(moment: datetime) -> datetime:
    """``cryptography`` 38 gives naive UTC datetimes."""
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _common_name(name: x509.Name) -> str | None:
    attrs = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    value = attrs[0].value if attrs else None
    return value if isinstance(value, str) else None


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        return False
    return constraints.ca


def _is_p256(cert: x509.Certificate) -> bool:
    try:
        key = cert.public_key()
    except (ValueError, UnsupportedAlgorithm):
        return False
    return isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1)


def _signed_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    """``cert`` names ``issuer`` as its issuer and carries its ECDSA signature."""
    if cert.issuer != issuer.subject:
        return False
    try:
        key = issuer.public_key()
        algorithm = cert.signature_hash_algorithm
        if not isinstance(key, ec.EllipticCurvePublicKey) or algorithm is None:
            return False
        key.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(algorithm))
        return True
    except (InvalidSignature, UnsupportedAlgorithm, ValueError):
        return False


def _parse_all(cert: x509.Certificate) -> None:
    """``cryptography`` parses lazily: read every part now, so a malformed certificate is a
    failed check rather than an exception later."""
    parts: list[object] = [
        cert.subject,
        cert.issuer,
        cert.extensions,
        cert.public_key(),
        cert.not_valid_before,
        cert.not_valid_after,
        cert.signature_hash_algorithm,
        cert.tbs_certificate_bytes,
        cert.signature,
    ]
    del parts


def load_root(pem: str) -> x509.Certificate:
    """The trust anchor; raises ``ValueError`` when ``pem`` is not a PEM certificate."""
    try:
        root = x509.load_pem_x509_certificate(pem.encode("latin-1"))
        _parse_all(root)
        return root
    except (ValueError, UnicodeEncodeError, UnsupportedAlgorithm) as err:
        raise ValueError("trusted_root_pem is not a PEM certificate") from err


def _verify_chain(pems: list[str], root: x509.Certificate) -> list[x509.Certificate] | str:
    """The chain, leaf first, or a sentence saying what is wrong with it (see module doc)."""
    try:
        return _check_chain(pems, root)
    except Exception as err:  # untrusted input: a defect is a failed check, never a crash
        return f"the certificate chain does not parse: {type(err).__name__}"


def _check_chain(pems: list[str], root: x509.Certificate) -> list[x509.Certificate] | str:
    if len(pems) != len(_PCK_NAMES):
        return f"expected {len(_PCK_NAMES)} certificates, found {len(pems)}"
    certs: list[x509.Certificate] = []
    for i, pem in enumerate(pems):
        try:
            cert = x509.load_pem_x509_certificate(pem.encode("latin-1"))
            _parse_all(cert)
        except Exception:  # cryptography raises ValueError, KeyError, … on malformed DER
            return f"certificate {i + 1} does not parse"
        certs.append(cert)
    last = certs[-1]
    if last.public_bytes(Encoding.DER) != root.public_bytes(Encoding.DER):
        return "root certificate is not the pinned root"
    if not _signed_by(last, last):
        return "root self-signature is invalid"
    for i, cert in enumerate(certs):
        cn = _common_name(cert.subject) or "(no CN)"
        if cn not in _PCK_NAMES[i]:
            return f'certificate {i + 1} is "{cn}", expected {" or ".join(_PCK_NAMES[i])}'
        if not _is_p256(cert):
            return f"{cn}: key is not P-256"
        if _is_ca(cert) != (i > 0):
            return f"{cn}: CA flag is {_is_ca(cert)}, expected {i > 0}"
        if i + 1 < len(certs) and not _signed_by(cert, certs[i + 1]):
            issuer_cn = _common_name(certs[i + 1].subject) or "its issuer"
            return f"{cn}: not signed by {issuer_cn}"
    return certs


def _validity_problem(certs: list[x509.Certificate], at: datetime) -> str | None:
    for cert in certs:
        name = _common_name(cert.subject) or f"{cert.serial_number:X}"
        if at < _utc(cert.not_valid_before):
            return f"{name} not valid before {_iso(_utc(cert.not_valid_before))}"
        if at > _utc(cert.not_valid_after):
            return f"{name} expired at {_iso(_utc(cert.not_valid_after))}"
    return None


def _verify_p256(key: ec.EllipticCurvePublicKey, raw_signature: bytes, data: bytes) -> bool:
    """ECDSA-SHA256 over ``data`` with Intel's raw ``r ‖ s`` signature."""
    if len(raw_signature) != 64:
        return False
    r = int.from_bytes(raw_signature[:32], "big")
    s = int.from_bytes(raw_signature[32:], "big")
    try:
        key.verify(encode_dss_signature(r, s), data, ec.ECDSA(hashes.SHA256()))
        return True
    except (InvalidSignature, ValueError):
        return False


def _attestation_key(raw: bytes) -> ec.EllipticCurvePublicKey | None:
    if len(raw) != 64:
        return None
    try:
        return ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b"\x04" + raw)
    except ValueError:
        return None


# --- Policy ----------------------------------------------------------------------------------


def _is_hex(value: str, size: int) -> bool:
    return len(value) == size * 2 and re.fullmatch(r"[0-9a-fA-F]*", value) is not None


def normalise_measurements(sets: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Approved measurement sets with lowercase hex. Each needs ``mrtd``; the other fields of
    :data:`MEASUREMENT_FIELDS` are optional (left out = not compared); ``id`` names a set.
    Raises ``ValueError`` on a malformed set (an unknown field too: a misspelt one would
    otherwise silently pin nothing)."""
    out: list[dict[str, str]] = []
    for index, given in enumerate(sets):
        if not isinstance(given, Mapping):
            raise ValueError(f"approved_measurements[{index}] must be a mapping")
        unknown = set(given) - set(MEASUREMENT_FIELDS) - {"id"}
        if unknown:
            raise ValueError(f"approved_measurements[{index}]: unknown fields {sorted(unknown)}")
        normalised: dict[str, str] = {}
        if given.get("id") is not None:
            normalised["id"] = str(given["id"])
        for name, size in MEASUREMENT_FIELDS.items():
            value = given.get(name)
            if value is None:
                continue
            if not isinstance(value, str) or not _is_hex(value, size):
                raise ValueError(f"approved_measurements[{index}].{name} must be {size} bytes of hex")
            normalised[name] = value.lower()
        if "mrtd" not in normalised:
            raise ValueError(f"approved_measurements[{index}].mrtd is required")
        out.append(normalised)
    return out


def match_measurements(body: TdReportBody, sets: Sequence[Mapping[str, str]]) -> str | None:
    """The id (or ``#index``) of the first set the TD report matches on all its fields."""
    for index, approved in enumerate(sets):
        if all(
            getattr(body, name) == approved[name].lower()
            for name in MEASUREMENT_FIELDS
            if name in approved
        ):
            return approved.get("id", f"#{index}")
    return None


def is_debug_td(body: TdReportBody) -> bool:
    """TD_ATTRIBUTES (u64, little-endian) bit 0: DEBUG."""
    return bool(int(body.td_attributes[:2], 16) & 0x01)


def report_data_for(
    nonce: str, tls_key_sha256: str, session_key_sha256: str | None = None
) -> str:
    """The 64 REPORTDATA bytes (128 lowercase hex) of ZML's binding (``reportDataFor`` of
    ``@zml/tdx``): ``nonce ‖ SHA-256("zml.tdx.report-data.v1" ‖ 0x00 ‖ tls_key_sha256 ‖
    session_key_sha256)``, the session hash 32 zero bytes without a session key. All inputs
    are 32 bytes of hex; raises ``ValueError`` otherwise."""
    session = session_key_sha256 if session_key_sha256 is not None else "00" * 32
    for name, value in (("nonce", nonce), ("tls_key_sha256", tls_key_sha256), ("session_key_sha256", session)):
        if not isinstance(value, str) or not _is_hex(value, 32):
            raise ValueError(f"{name} must be 32 bytes of hex")
    digest = hashlib.sha256(
        REPORT_DATA_DOMAIN + b"\x00" + bytes.fromhex(tls_key_sha256) + bytes.fromhex(session)
    ).hexdigest()
    return nonce.lower() + digest


# --- The verdict -----------------------------------------------------------------------------


@dataclass(frozen=True)
class AttestationCheck:
    """One verification step: its name, whether it passed, and why."""

    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class AttestationResult:
    """The outcome: ``ok`` only when every check passed; ``reason`` is ``name: detail`` of
    the first failed one."""

    ok: bool
    reason: str | None
    checks: list[AttestationCheck]
    quote: TdxQuote | None
    """The parsed quote; ``None`` when it did not parse."""
    pck: PckInfo | None
    matched_measurement_set: str | None
    verified_at: datetime
    expires_at: datetime | None
    """The earliest ``notAfter`` of the PCK chain: the result holds no longer."""

    def check(self, name: str) -> AttestationCheck | None:
        return next((c for c in self.checks if c.name == name), None)

    @property
    def failed(self) -> list[str]:
        """Names of the failed checks, in order."""
        return [c.name for c in self.checks if not c.ok]


def _finish(
    checks: list[AttestationCheck],
    *,
    at: datetime,
    quote: TdxQuote | None = None,
    pck: PckInfo | None = None,
    matched: str | None = None,
    expires_at: datetime | None = None,
) -> AttestationResult:
    failed = next((c for c in checks if not c.ok), None)
    return AttestationResult(
        ok=failed is None and bool(checks),
        reason=f"{failed.name}: {failed.detail}" if failed else None,
        checks=checks,
        quote=quote,
        pck=pck,
        matched_measurement_set=matched,
        verified_at=at,
        expires_at=expires_at,
    )


def verify_quote(
    quote: bytes | str | TdxQuote,
    *,
    trusted_root_pem: str = INTEL_SGX_ROOT_CA_PEM,
    at: datetime | None = None,
    approved_measurements: Sequence[Mapping[str, Any]] | None = None,
    expected_report_data: str | bytes | None = None,
    allow_debug: bool = False,
) -> AttestationResult:
    """Verifies a TDX quote v4/v5 at time ``at`` (default now) against ``trusted_root_pem``
    (default Intel's SGX root). ``approved_measurements`` ``None`` skips the measurement
    check (an empty list approves nothing); ``expected_report_data`` (64 bytes, or 128 hex)
    ``None`` skips REPORTDATA. Collateral (TCB status, CRLs) is not checked: see the module
    doc. Bad quotes are failed checks, never exceptions; raises ``ValueError`` only for a
    bad root, policy or time."""
    moment = _utc(at) if at is not None else datetime.now(timezone.utc)
    root = load_root(trusted_root_pem)
    approved = normalise_measurements(approved_measurements) if approved_measurements is not None else None
    expected: bytes | None = None
    if expected_report_data is not None:
        if isinstance(expected_report_data, str):
            if not _is_hex(expected_report_data, 64):
                raise ValueError("expected_report_data must be 64 bytes of hex")
            expected = bytes.fromhex(expected_report_data)
        else:
            expected = bytes(expected_report_data)
            if len(expected) != 64:
                raise ValueError("expected_report_data must be 64 bytes")

    checks: list[AttestationCheck] = []

    def add(name: str, ok: bool, detail: str) -> bool:
        checks.append(AttestationCheck(name, ok, detail))
        return ok

    if isinstance(quote, TdxQuote):
        parsed = quote
    else:
        try:
            parsed = parse_quote(quote)
        except QuoteParseError as err:
            add("quote_format", False, str(err))
            return _finish(checks, at=moment)
    trailing = f" (+{parsed.trailing_bytes} trailing bytes ignored)" if parsed.trailing_bytes else ""
    add(
        "quote_format",
        True,
        f"v{parsed.version}, TD report {'1.5' if parsed.body_type == 3 else '1.0'}{trailing}",
    )
    add("qe_vendor", parsed.qe_vendor_id == INTEL_QE_VENDOR_ID, f"QE vendor {parsed.qe_vendor_id}")

    pck: PckInfo | None = None
    expires_at: datetime | None = None
    chain = _verify_chain(parsed.pck_chain_pem, root)
    if isinstance(chain, str):
        add("pck_chain", False, chain)
    else:
        names = " → ".join(_common_name(c.subject) or "?" for c in chain)
        add("pck_chain", True, f"{names} (pinned)")
        expires_at = min(_utc(c.not_valid_after) for c in chain)
        problem = _validity_problem(chain, moment)
        add("pck_chain_validity", problem is None, problem or f"all valid at {_iso(moment)}")
        try:
            pck = _pck_info(chain[0])
            add("pck_extension", True, f"FMSPC {pck.fmspc}, PCESVN {pck.pcesvn}")
        except Exception as err:  # _DerError, or cryptography's on a malformed extension
            add("pck_extension", False, str(err) or "the SGX extension does not parse")
        leaf_key = chain[0].public_key()
        assert isinstance(leaf_key, ec.EllipticCurvePublicKey)  # _verify_chain checked P-256
        ok = _verify_p256(leaf_key, parsed.qe_report_signature, parsed.qe_report_bytes)
        add(
            "qe_report_signature",
            ok,
            "signed by the PCK key" if ok else "does not verify with the PCK key",
        )

    digest = hashlib.sha256(parsed.attestation_key + parsed.qe_auth_data).hexdigest()
    ok = parsed.qe_report.reportdata == digest + "00" * 32
    add(
        "qe_report_data",
        ok,
        "binds the attestation key" if ok else "does not bind the attestation key and QE auth data",
    )

    qe = parsed.qe_report
    problems = [
        f"MRSIGNER {qe.mrsigner} is not Intel's TD-QE" if qe.mrsigner != INTEL_TD_QE_MRSIGNER else "",
        f"ISVPRODID {qe.isvprodid} is not 2" if qe.isvprodid != TD_QE_ISVPRODID else "",
        "QE is a debug enclave" if int(qe.attributes[:2], 16) & 0x02 else "",
    ]
    problems = [p for p in problems if p]
    add(
        "qe_report_identity",
        not problems,
        "; ".join(problems) if problems else f"Intel TD-QE, ISVSVN {qe.isvsvn}",
    )

    ak = _attestation_key(parsed.attestation_key)
    ok = ak is not None and _verify_p256(ak, parsed.signature, parsed.signed_region)
    add(
        "quote_signature",
        ok,
        "header and body signed by the attestation key"
        if ok
        else ("does not verify with the attestation key" if ak else "attestation key is not a P-256 point"),
    )

    debug = is_debug_td(parsed.body)
    add(
        "td_debug",
        not debug or allow_debug,
        f"DEBUG {'set' if debug else 'clear'} (td_attributes {parsed.body.td_attributes})"
        + (", allowed by policy" if debug and allow_debug else ""),
    )
    if parsed.body.mrservicetd is not None:
        bound = bool(int(parsed.body.mrservicetd, 16))
        add("mrservicetd", not bound, "a service TD is bound" if bound else "no service TD bound")

    matched: str | None = None
    if approved is not None:
        matched = match_measurements(parsed.body, approved)
        add(
            "measurements",
            matched is not None,
            f"matches approved set {matched}"
            if matched is not None
            else f"MRTD {parsed.body.mrtd} and RTMRs match no approved set",
        )
    if expected is not None:
        ok = hmac.compare_digest(bytes.fromhex(parsed.body.reportdata), expected)
        add("report_data", ok, "REPORTDATA matches" if ok else "REPORTDATA differs from the expected value")

    return _finish(checks, at=moment, quote=parsed, pck=pck, matched=matched, expires_at=expires_at)


X25519_SPKI_PREFIX = bytes.fromhex("302a300506032b656e032100")


def verify_session_attestation(
    attestation: Mapping[str, Any],
    *,
    nonce: str,
    approved_measurements: Sequence[Mapping[str, Any]],
    trusted_root_pem: str | None = None,
    at: datetime | None = None,
    allow_debug: bool = False,
) -> AttestationResult:
    """Checks a tier-4 session's ``attestation`` (the session answer's object:
    ``quote_b64``, ``nonce_hex``, ``session_public_key``, ``tls_key_sha256``) on the client's
    side: the answer is for the client's own ``nonce``, the session key is an X25519 SPKI, and
    the quote verifies (see :func:`verify_quote`) with an approved measurement and a
    REPORTDATA binding exactly that nonce, the TLS key hash and SHA-256 of that session key's
    SPKI DER. Never raises for bad data: every problem is a failed check (the quote's checks,
    then ``nonce`` and ``session_key``). Raises ``ValueError`` for a malformed ``nonce``,
    measurement set or root."""
    if not _is_hex(nonce, 32):
        raise ValueError("nonce must be 32 bytes of hex")
    moment = _utc(at) if at is not None else datetime.now(timezone.utc)
    normalised = normalise_measurements(approved_measurements)
    extra: list[AttestationCheck] = []
    answer_nonce = attestation.get("nonce_hex")
    same = isinstance(answer_nonce, str) and answer_nonce.lower() == nonce.lower()
    extra.append(
        AttestationCheck(
            "nonce", same, "the answer is for this nonce" if same else "the answer is for another nonce"
        )
    )
    session_key_sha256: str | None = None
    spki_b64 = attestation.get("session_public_key")
    try:
        if not isinstance(spki_b64, str):
            raise ValueError("missing")
        der = base64.b64decode(spki_b64 + "=" * (-len(spki_b64) % 4), validate=True)
        if len(der) != len(X25519_SPKI_PREFIX) + 32 or not der.startswith(X25519_SPKI_PREFIX):
            raise ValueError("not X25519")
        session_key_sha256 = hashlib.sha256(der).hexdigest()
        extra.append(AttestationCheck("session_key", True, f"X25519 key {session_key_sha256}"))
    except (ValueError, binascii.Error):
        extra.append(
            AttestationCheck("session_key", False, "session_public_key is not an X25519 SPKI")
        )
    quote_b64 = attestation.get("quote_b64")
    tls_key = attestation.get("tls_key_sha256")
    problem = (
        "no quote"
        if not isinstance(quote_b64, str) or not quote_b64
        else "the attestation binds no TLS key"
        if not isinstance(tls_key, str) or not _is_hex(tls_key, 32)
        else "no session key to bind"
        if session_key_sha256 is None
        else None
    )
    if problem is not None or not isinstance(quote_b64, str) or not isinstance(tls_key, str):
        checks = [*extra, AttestationCheck("report_data", False, problem or "incomplete")]
        return _finish(checks, at=moment)
    result = verify_quote(
        quote_b64,
        trusted_root_pem=trusted_root_pem or INTEL_SGX_ROOT_CA_PEM,
        at=moment,
        approved_measurements=normalised,
        expected_report_data=report_data_for(nonce, tls_key, session_key_sha256),
        allow_debug=allow_debug,
    )
    return _finish(
        [*result.checks, *extra],
        at=moment,
        quote=result.quote,
        pck=result.pck,
        matched=result.matched_measurement_set,
        expires_at=result.expires_at,
    )
