"""Confidential sessions in both clients against a tiny local gateway + TD on a real socket
(``tests/_fake_gateway.py``): ``sessions.create`` verifies the node's quote and binding before
it seals anything, ``session.chat.completions.create`` seals each request and opens the
answer, and every misbehaviour of a hostile gateway is refused with a named error. Pure unit
tests: no real gateway (the quotes come from the repository's test PKI via Node)."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import zml
from _fake_gateway import MEASUREMENT, NODE, FakeGateway, serve
from _node_helpers import QuoteMaker, quote_maker  # noqa: F401 (the fixture)
from zml._sealed import from_b64url

MODEL = "llama-3.1-8b-instruct"
MESSAGES = [{"role": "user", "content": "the secret prompt"}]


@pytest.fixture
def gateway(quote_maker: QuoteMaker) -> Iterator[FakeGateway]:
    yield from serve(FakeGateway(quotes=quote_maker))


@pytest.fixture
def client(gateway: FakeGateway) -> Iterator[zml.ZML]:
    with zml.ZML(base_url=gateway.url, api_key="k", timeout=10) as c:
        yield c


def open_session(client: zml.ZML, gateway: FakeGateway, **options: object) -> zml.ConfidentialSession:
    return client.sessions.create(MODEL, trusted_root_pem=gateway.root_pem, **options)  # type: ignore[arg-type]


def refusal(client: zml.ZML, gateway: FakeGateway, **options: object) -> zml.AttestationError:
    with pytest.raises(zml.AttestationError) as caught:
        open_session(client, gateway, **options)
    err = caught.value
    assert err.session_id is not None and err.session_id in gateway.deleted
    assert err.node_id == NODE
    return err


# --- sessions.create -------------------------------------------------------------------------


def test_create_verifies_the_node_and_seals_a_chat(client: zml.ZML, gateway: FakeGateway) -> None:
    session = open_session(client, gateway, ttl_s=600)
    assert session.session_id.startswith("ses-") and session.node_id == NODE
    assert session.model == MODEL and session.tier == 4
    assert session.expires_at - session.created_at == 600_000
    assert session.verification.ok and session.verification.failed == []
    assert session.verification.matched_measurement_set == f"allowlist:{NODE}"
    assert gateway.allowlist_requests == 1
    key = gateway.keys[session.session_id]
    assert session.key_id == key.key_id

    answer = session.chat.completions.create(messages=MESSAGES, temperature=0.2, max_tokens=16)
    assert isinstance(answer, zml.ChatCompletion)
    assert answer.choices[0].message.content == "echo: the secret prompt"
    assert answer.routing.node == NODE and answer.routing.tier == 4
    assert answer.request_id == "req-1" and answer.usage is not None
    got = gateway.received[-1]
    assert got.content_type == "application/vnd.zml.sealed-request+json"
    assert got.body == {
        "model": MODEL,
        "messages": MESSAGES,
        "stream": False,
        "temperature": 0.2,
        "max_tokens": 16,
    }
    env = got.envelope
    assert set(env) == {
        "zml_sealed", "model", "session_id", "tier", "stream", "max_tokens",
        "suite", "key_id", "seq", "enc", "ciphertext",
    }  # fmt: skip
    assert (env["model"], env["session_id"], env["tier"], env["stream"]) == (
        MODEL,
        session.session_id,
        4,
        False,
    )
    assert (env["seq"], env["max_tokens"], env["key_id"]) == (0, 16, key.key_id)
    assert env["suite"] == "x25519-sha256-chacha20poly1305"
    assert b"secret" not in json.dumps(env).encode()
    assert b"secret" not in from_b64url(env["ciphertext"])


def test_a_stream_is_sealed_and_opened_chunk_by_chunk(client: zml.ZML, gateway: FakeGateway) -> None:
    session = open_session(client, gateway, suite="x25519-sha256-aes128gcm")
    with session.chat.completions.create(messages=MESSAGES, stream=True) as stream:
        assert isinstance(stream, zml.Stream)
        assert stream.routing.node == NODE
        text = "".join(c.choices[0].delta.content or "" for c in stream)
    assert text == "echo: the secret prompt"
    env = gateway.received[-1].envelope
    assert env["stream"] is True and env["suite"] == "x25519-sha256-aes128gcm"
    assert gateway.received[-1].body is not None and gateway.received[-1].body["stream"] is True


def test_sequence_numbers_count_up_per_session_and_across_threads(
    client: zml.ZML, gateway: FakeGateway
) -> None:
    session = open_session(client, gateway)
    for _ in range(3):
        session.chat.completions.create(messages=MESSAGES)
    other = open_session(client, gateway)
    other.chat.completions.create(messages=MESSAGES)
    seqs = [r.envelope["seq"] for r in gateway.received]
    assert seqs == [0, 1, 2, 0]
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(5):
                session.chat.completions.create(messages=MESSAGES)
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    mine = sorted(r.envelope["seq"] for r in gateway.received if r.envelope["session_id"] == session.session_id)
    assert mine == list(range(23))


def test_caller_measurements_are_used_instead_of_the_allowlist(
    client: zml.ZML, gateway: FakeGateway
) -> None:
    session = open_session(
        client,
        gateway,
        approved_measurements=[{"id": "mine", "mrtd": MEASUREMENT["mrtd"].upper(), "rtmr3": MEASUREMENT["rtmr3"]}],
    )
    assert session.verification.matched_measurement_set == "mine"
    assert gateway.allowlist_requests == 0
    err = refusal(client, gateway, approved_measurements=[{"mrtd": "c4" * 48}])
    assert err.check == "measurements" and err.result is not None
    assert err.result.failed == ["measurements"]


def test_malformed_arguments_raise_before_anything_is_sent(
    client: zml.ZML, gateway: FakeGateway
) -> None:
    for options in [
        {"approved_measurements": [{"mrtd": "zz"}]},
        {"approved_measurements": [{"rtmr3": "00" * 48}]},
        {"trusted_root_pem": "not a pem"},
        {"suite": "x25519-sha256-aes256gcm"},
    ]:
        with pytest.raises(ValueError):
            client.sessions.create(MODEL, **options)  # type: ignore[arg-type]
    assert gateway.keys == {}


@pytest.mark.parametrize(
    ("fault", "check"),
    [
        ("quote_other_nonce", "report_data"),
        ("swap_session_key", "report_data"),
        ("debug", "td_debug"),
        ("other_mrtd", "measurements"),
        ("other_pki", "pck_chain"),
        ("allowlist_missing", "measurements"),
        ("allowlist_failing", "measurements"),
    ],
)
def test_an_untrustworthy_node_is_refused_and_its_session_deleted(
    client: zml.ZML, gateway: FakeGateway, fault: str, check: str
) -> None:
    gateway.faults.add(fault)
    err = refusal(client, gateway)
    assert err.check == check, err
    assert isinstance(err, zml.ZmlError) and err.code == "attestation_failed"
    assert gateway.received == []  # nothing was sealed to the key


def test_an_answer_for_another_nonce_names_both_checks(client: zml.ZML, gateway: FakeGateway) -> None:
    gateway.faults.update({"quote_other_nonce", "answer_other_nonce"})
    err = refusal(client, gateway)
    assert err.result is not None and err.result.failed == ["report_data", "nonce"]


def test_the_default_trust_anchor_is_intels(client: zml.ZML, gateway: FakeGateway) -> None:
    with pytest.raises(zml.AttestationError) as caught:
        client.sessions.create(MODEL)
    assert caught.value.check == "pck_chain"
    assert caught.value.session_id in gateway.deleted


# --- What the client refuses in answers ------------------------------------------------------


@pytest.mark.parametrize("fault", ["flip_chunk", "unsealed_200", "swap_answer"])
def test_a_whole_answer_that_does_not_open_is_refused(
    client: zml.ZML, gateway: FakeGateway, fault: str
) -> None:
    session = open_session(client, gateway)
    session.chat.completions.create(messages=MESSAGES)  # a first answer, to swap in
    gateway.faults.add(fault)
    with pytest.raises(zml.SealedResponseError) as caught:
        session.chat.completions.create(messages=MESSAGES)
    assert caught.value.code == "sealed_response_invalid"
    assert caught.value.request_id == "req-1"


@pytest.mark.parametrize("fault", ["flip_chunk", "reorder", "truncate", "drop_final_event_name"])
def test_a_stream_that_does_not_open_is_refused(client: zml.ZML, gateway: FakeGateway, fault: str) -> None:
    session = open_session(client, gateway)
    gateway.faults.add(fault)
    stream = session.chat.completions.create(messages=MESSAGES, stream=True)
    with pytest.raises(zml.SealedResponseError) as caught:
        list(stream)
    assert caught.value.code == "sealed_response_invalid"
    assert caught.value.routing is not None and caught.value.routing.node == NODE


def test_gateway_errors_stay_the_usual_api_errors(client: zml.ZML, gateway: FakeGateway) -> None:
    session = open_session(client, gateway)
    gateway.faults.add("gateway_503")
    with pytest.raises(zml.ServiceUnavailableError) as unavailable:
        session.chat.completions.create(messages=MESSAGES)
    assert unavailable.value.code == "session_node_unavailable"
    gateway.faults.clear()
    gateway.faults.add("stream_error_event")
    stream = session.chat.completions.create(messages=MESSAGES, stream=True)
    with pytest.raises(zml.StreamError) as broken:
        list(stream)
    assert broken.value.code == "stream_interrupted"


def test_the_nodes_own_errors_are_opened_and_raised_typed(client: zml.ZML, gateway: FakeGateway) -> None:
    session = open_session(client, gateway)
    gateway.faults.add("inner_error")
    with pytest.raises(zml.BadRequestError) as caught:
        session.chat.completions.create(messages=MESSAGES, temperature=9)
    assert (caught.value.status, caught.value.code, caught.value.param) == (
        400,
        "invalid_request",
        "temperature",
    )
    gateway.faults.clear()
    gateway.faults.add("whole_for_stream")
    with pytest.raises(zml.BadRequestError) as whole:
        session.chat.completions.create(messages=MESSAGES, stream=True)
    assert whole.value.param == "stream"


def test_a_td_refusal_in_clear_is_an_api_error(client: zml.ZML, gateway: FakeGateway) -> None:
    session = open_session(client, gateway)
    gateway.keys[session.session_id] = gateway.keys[session.session_id].__class__.generate()
    with pytest.raises(zml.ZmlAPIError) as caught:
        session.chat.completions.create(messages=MESSAGES)
    assert (caught.value.status, caught.value.code) == (410, "session_key_unknown")


def test_model_must_be_the_sessions(client: zml.ZML, gateway: FakeGateway) -> None:
    session = open_session(client, gateway)
    session.chat.completions.create(model=MODEL, messages=MESSAGES)
    with pytest.raises(ValueError):
        session.chat.completions.create(model="other", messages=MESSAGES)


def test_close_and_delete_end_the_session(client: zml.ZML, gateway: FakeGateway) -> None:
    with open_session(client, gateway) as session:
        session.chat.completions.create(messages=MESSAGES)
    assert gateway.deleted == [session.session_id]
    session.close()  # already closed: nothing sent
    assert gateway.deleted == [session.session_id]
    with pytest.raises(zml.NotFoundError):
        session.chat.completions.create(messages=MESSAGES)
    other = open_session(client, gateway)
    other.delete()
    assert gateway.deleted[-1] == other.session_id
    other.close()
    with pytest.raises(zml.NotFoundError):
        other.delete()


def test_the_session_key_must_be_x25519(client: zml.ZML, gateway: FakeGateway) -> None:
    original = gateway.create_session

    def bad_key(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        status, answer = original(body)
        attestation = answer["attestation"]
        assert isinstance(attestation, dict)
        attestation["session_public_key"] = base64.b64encode(bytes(44)).decode()
        return status, answer

    gateway.create_session = bad_key  # type: ignore[assignment]
    err = refusal(client, gateway)
    assert err.result is not None and "session_key" in err.result.failed


# --- AsyncZML --------------------------------------------------------------------------------


def test_async_sessions(gateway: FakeGateway) -> None:
    async def scenario() -> None:
        async with zml.AsyncZML(base_url=gateway.url, api_key="k", timeout=10) as aclient:
            session = await aclient.sessions.create(MODEL, trusted_root_pem=gateway.root_pem)
            assert isinstance(session, zml.AsyncConfidentialSession)
            assert session.verification.ok and session.node_id == NODE
            answer = await session.chat.completions.create(messages=MESSAGES)
            assert answer.choices[0].message.content == "echo: the secret prompt"
            assert answer.routing.node == NODE
            stream = await session.chat.completions.create(messages=MESSAGES, stream=True)
            async with stream:
                text = "".join([c.choices[0].delta.content or "" async for c in stream])
            assert text == "echo: the secret prompt"
            await asyncio.gather(*(session.chat.completions.create(messages=MESSAGES) for _ in range(6)))
            seqs = sorted(r.envelope["seq"] for r in gateway.received)
            assert seqs == list(range(8))
            gateway.faults.add("flip_chunk")
            with pytest.raises(zml.SealedResponseError):
                await session.chat.completions.create(messages=MESSAGES)
            stream = await session.chat.completions.create(messages=MESSAGES, stream=True)
            with pytest.raises(zml.SealedResponseError):
                async for _ in stream:
                    pass
            gateway.faults.clear()
            gateway.faults.add("debug")
            with pytest.raises(zml.AttestationError) as caught:
                await aclient.sessions.create(MODEL, trusted_root_pem=gateway.root_pem)
            assert caught.value.check == "td_debug" and caught.value.session_id in gateway.deleted
            async with session:
                pass
            assert session.session_id in gateway.deleted

    asyncio.run(scenario())
