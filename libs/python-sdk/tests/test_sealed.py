"""The sealed channel in one process, client side (``zml._sealed``) against the TD side
written from the same doc (``tests/_td_side.py``): what the client seals only the session
key's holder opens, the answer opens only for the request it answers, and every change on
the way is refused. Pure unit tests: no gateway."""

from __future__ import annotations

import base64
import hashlib
import json
import random
from typing import Any

import pytest

from _td_side import ResponseSealer, SessionKey, TdError, open_request
from zml import SealedResponseError
from zml._sealed import (
    SEALED_VERSION,
    SUITES,
    GatewayError,
    ResponseOpener,
    SealedChannel,
    SealedRequest,
    StreamEnd,
    StreamEvent,
    StreamHead,
    StreamPart,
    b64url,
    from_b64url,
    request_aad,
    seal_chunk,
    session_public_key,
)

PATH = "/v1/chat/completions"
SESSION = "ses-" + "ab" * 16
SUITE_NAMES = list(SUITES)


def body(stream: bool = False, model: str = "m1") -> bytes:
    return json.dumps(
        {
            "model": model,
            "stream": stream,
            "messages": [{"role": "user", "content": "the secret prompt"}],
        }
    ).encode()


CHANNEL_FIELDS = ("session_id", "session_public_key_b64", "suite", "ephemeral")


def channel_to(key: SessionKey, **extra: Any) -> SealedChannel:
    fields: dict[str, Any] = {"session_id": SESSION, "session_public_key_b64": key.public_b64}
    fields.update(extra)
    return SealedChannel(**fields)


def sealed(key: SessionKey, channel: SealedChannel | None = None, **extra: Any) -> SealedRequest:
    """A request sealed in ``channel``, or in a channel of its own (channel fields in
    ``extra`` go to it)."""
    if channel is None:
        channel = channel_to(key, **{k: extra.pop(k) for k in CHANNEL_FIELDS if k in extra})
    fields: dict[str, Any] = {
        "path": PATH,
        "body": body(bool(extra.get("stream", False))),
        "model": "m1",
        "stream": False,
        "seq": 7,
    }
    fields.update(extra)
    return channel.seal(**fields)


@pytest.fixture
def key() -> SessionKey:
    return SessionKey.generate()


def test_session_key_is_read_from_spki_der(key: SessionKey) -> None:
    pub = session_public_key(key.public_b64)
    assert pub.key_id == hashlib.sha256(key.spki_der).hexdigest() == key.key_id
    assert pub.raw == key.spki_der[-32:] and len(pub.raw) == 32
    for bad in [base64.b64encode(bytes(44)).decode(), "not base64!", key.public_b64[:-8]]:
        with pytest.raises(ValueError):
            session_public_key(bad)


def test_aad_is_the_documented_lines() -> None:
    aad = request_aad(
        path=PATH,
        model="m1",
        session_id=SESSION,
        stream=True,
        seq=12,
        suite="x25519-sha256-aes128gcm",
        key_id="0f" * 32,
    )
    assert aad == (
        b"zml-sealed/2\n/v1/chat/completions\nm1\n" + SESSION.encode() + b"\n1\n12\n"
        b"x25519-sha256-aes128gcm\n" + b"0f" * 32
    )


@pytest.mark.parametrize("suite", SUITE_NAMES)
def test_round_trips_a_request_and_its_whole_answer(key: SessionKey, suite: str) -> None:
    request = sealed(key, suite=suite, policy="p", max_tokens=9)
    env = request.envelope
    assert env == {
        "zml_sealed": 2,
        "model": "m1",
        "session_id": SESSION,
        "tier": 4,
        "policy": "p",
        "stream": False,
        "max_tokens": 9,
        "suite": suite,
        "key_id": key.key_id,
        "seq": 7,
        "enc": env["enc"],
        "ciphertext": env["ciphertext"],
    }
    assert json.loads(request.body) == env
    assert len(env["enc"]) == 43 and len(from_b64url(env["enc"])) == 32
    assert b"secret prompt" not in request.body
    opened = open_request(json.loads(request.body), PATH, key)
    assert opened.body == body()
    answer = opened.sealer.answer(200, "application/json", b'{"id":"c1"}')
    result = request.opener.open_answer(answer)
    assert (result.status, result.content_type, result.body) == (
        200,
        "application/json",
        b'{"id":"c1"}',
    )


def test_a_body_less_answer_is_the_head_alone_sealed_final(key: SessionKey) -> None:
    request = sealed(key)
    sealer = open_request(request.envelope, PATH, key).sealer
    answer = json.loads(sealer.answer(204, "text/plain", b""))
    assert len(answer["chunks"]) == 1
    result = request.opener.open_answer(json.dumps(answer).encode())
    assert (result.status, result.body) == (204, b"")


def test_optional_clear_fields_are_left_out(key: SessionKey) -> None:
    env = sealed(key, tier=None).envelope
    assert "tier" not in env and "policy" not in env and "max_tokens" not in env
    open_request(env, PATH, key)


def test_each_channel_has_its_own_ephemeral_key_and_its_requests_share_it(key: SessionKey) -> None:
    a, b = sealed(key, seq=1), sealed(key, seq=1)
    assert a.envelope["enc"] != b.envelope["enc"]
    assert a.envelope["ciphertext"] != b.envelope["ciphertext"]
    channel = channel_to(key)
    first, second = sealed(key, channel, seq=None), sealed(key, channel, seq=None)
    assert first.envelope["enc"] == second.envelope["enc"] == channel.enc
    assert (first.envelope["seq"], second.envelope["seq"]) == (0, 1)
    assert first.envelope["ciphertext"] != second.envelope["ciphertext"]


def test_a_channel_never_seals_a_number_twice(key: SessionKey) -> None:
    channel = channel_to(key)
    sealed(key, channel, seq=5)
    for seq in (5, 4, 0):
        with pytest.raises(ValueError):
            sealed(key, channel, seq=seq)
    assert sealed(key, channel, seq=None).envelope["seq"] == 6


def test_refuses_fields_the_envelope_cannot_carry(key: SessionKey) -> None:
    extras: list[dict[str, Any]] = [
        {"model": "bad model"},
        {"model": "m\n1"},
        {"session_id": "ses-XYZ"},
        {"seq": -1},
        {"seq": 2**53},
        {"seq": True},
        {"policy": "a\nb"},
        {"max_tokens": 0},
        {"suite": "x25519-sha256-aes256gcm"},
        {"tier": 3},
        {"path": "v1/chat"},
        {"session_public_key_b64": "AAAA"},
    ]
    for extra in extras:
        with pytest.raises(ValueError):
            sealed(key, **extra)


# --- The request: tampering, AAD, replay -----------------------------------------------------


def flip(text: str, at: int = 5) -> str:
    raw = bytearray(from_b64url(text))
    raw[at % len(raw)] ^= 0x01
    return b64url(bytes(raw))


def refusal(envelope: Any, path: str, key: SessionKey) -> TdError:
    with pytest.raises(TdError) as caught:
        open_request(envelope, path, key)
    return caught.value


@pytest.mark.parametrize("suite", SUITE_NAMES)
def test_tampered_ciphertext_or_enc_does_not_open(key: SessionKey, suite: str) -> None:
    env = sealed(key, suite=suite).envelope
    for field_name, at in [("ciphertext", 0), ("ciphertext", -1), ("enc", 3)]:
        bad = {**env, field_name: flip(env[field_name], at)}
        assert refusal(bad, PATH, key).code == "sealed_request_rejected"
    assert refusal({**env, "ciphertext": env["ciphertext"][:-4]}, PATH, key).code in (
        "sealed_request_rejected",
        "sealed_request_invalid",
    )


@pytest.mark.parametrize(
    "change",
    [
        {"model": "m2"},
        {"seq": 8},
        {"stream": True},
        {"session_id": "ses-" + "cd" * 16},
        {"suite": "x25519-sha256-aes128gcm"},
    ],
    ids=lambda c: str(next(iter(c))),
)
def test_a_changed_clear_field_does_not_open(key: SessionKey, change: dict[str, Any]) -> None:
    env = sealed(key).envelope
    err = refusal({**env, **change}, PATH, key)
    assert (err.status, err.code) == (400, "sealed_request_rejected")
    open_request(env, PATH, key)  # the original still opens: a failed one used up nothing


def test_another_path_does_not_open(key: SessionKey) -> None:
    env = sealed(key).envelope
    assert refusal(env, "/v1/completions", key).code == "sealed_request_rejected"


def test_another_key_does_not_open(key: SessionKey) -> None:
    env = sealed(key).envelope
    other = SessionKey.generate()
    assert refusal(env, PATH, other).code == "session_key_unknown"
    # Even under the right key id, another private key cannot open it.
    impostor = SessionKey(private=other.private, spki_der=key.spki_der, key_id=key.key_id)
    assert refusal(env, PATH, impostor).code == "sealed_request_rejected"


def test_a_replayed_seq_is_refused(key: SessionKey) -> None:
    env = sealed(key, seq=3).envelope
    open_request(env, PATH, key)
    err = refusal(env, PATH, key)
    assert (err.status, err.code) == (409, "sealed_request_replayed")


def test_a_request_moved_to_another_position_of_its_channel_does_not_open(
    key: SessionKey,
) -> None:
    channel = channel_to(key)
    zero, one = (sealed(key, channel, seq=None).envelope for _ in range(2))
    for env, seq in ((one, 0), (zero, 1), (one, 2)):
        err = refusal({**env, "seq": seq}, PATH, key)
        assert (err.status, err.code) == (400, "sealed_request_rejected")
    # Under their own numbers, in any order, they open: a refused attempt used nothing up.
    assert open_request(one, PATH, key).body == open_request(zero, PATH, key).body == body()


def test_a_request_held_back_beyond_the_window_is_refused(key: SessionKey) -> None:
    channel = channel_to(key)
    first, edge, last = (sealed(key, channel, seq=n).envelope for n in (0, 1, 1024))
    open_request(last, PATH, key)
    open_request(edge, PATH, key)  # 1023 behind: inside the window
    err = refusal(first, PATH, key)  # 1024 behind: outside it, though never opened
    assert (err.status, err.code, err.param) == (409, "sealed_request_replayed", "seq")


def test_the_envelope_is_strict(key: SessionKey) -> None:
    env = sealed(key).envelope
    assert refusal({**env, "messages": []}, PATH, key).code == "sealed_request_invalid"
    old = refusal({**env, "zml_sealed": 1}, PATH, key)  # the previous format, by its version
    assert (old.code, old.param) == ("sealed_request_invalid", "zml_sealed")
    assert refusal({**env, "zml_sealed": 3}, PATH, key).code == "sealed_request_invalid"


def test_a_body_that_contradicts_the_clear_fields_is_refused_sealed(key: SessionKey) -> None:
    request = sealed(key, body=body(model="m2"), seq=1)
    err = refusal(request.envelope, PATH, key)
    assert (err.code, err.param) == ("sealed_request_invalid", "model")
    assert err.sealer is not None
    result = request.opener.open_answer(err.sealer.answer(400, "application/json", err.body()))
    assert result.status == 400 and json.loads(result.body)["error"]["param"] == "model"


# --- The whole answer: what the client refuses ----------------------------------------------


def answer_for(key: SessionKey, **extra: Any) -> tuple[ResponseOpener, ResponseSealer]:
    request = sealed(key, **extra)
    return request.opener, open_request(request.envelope, PATH, key, check_replay=False).sealer


def refused(run: Any) -> SealedResponseError:
    with pytest.raises(SealedResponseError) as caught:
        run()
    assert caught.value.code == "sealed_response_invalid"
    return caught.value


@pytest.mark.parametrize("suite", SUITE_NAMES)
def test_an_altered_whole_answer_is_refused(key: SessionKey, suite: str) -> None:
    opener, sealer = answer_for(key, suite=suite)
    good = json.loads(sealer.answer(200, "application/json", b'{"answer":42}'))

    def attempt(envelope: Any) -> None:
        opener.open_answer(json.dumps(envelope).encode())

    for i in range(2):
        chunks = list(good["chunks"])
        chunks[i] = flip(chunks[i])
        refused(lambda: attempt({**good, "chunks": chunks}))
    refused(lambda: attempt({**good, "chunks": good["chunks"][::-1]}))  # reordered
    refused(lambda: attempt({**good, "chunks": good["chunks"][:1]}))  # body dropped
    refused(lambda: attempt({**good, "chunks": good["chunks"] * 2}))  # extra chunks
    refused(lambda: attempt({**good, "chunks": []}))
    refused(lambda: attempt({**good, "response_nonce": flip(good["response_nonce"])}))
    refused(lambda: attempt({**good, "response_nonce": b64url(bytes(16))}))  # short nonce
    refused(lambda: attempt({k: v for k, v in good.items() if k != "response_nonce"}))
    refused(lambda: attempt({k: v for k, v in good.items() if k != "zml_sealed"}))
    refused(lambda: attempt({**good, "zml_sealed": True}))
    refused(lambda: opener.open_answer(b'{"id":"chatcmpl-1","choices":[]}'))  # unsealed
    refused(lambda: opener.open_answer(b"not json"))
    assert opener.open_answer(json.dumps(good).encode()).body == b'{"answer":42}'


def test_another_requests_answer_is_refused(key: SessionKey) -> None:
    opener_a, sealer_a = answer_for(key, seq=1)
    opener_b, sealer_b = answer_for(key, seq=2)
    answer_b = sealer_b.answer(200, "application/json", b"{}")
    refused(lambda: opener_a.open_answer(answer_b))
    assert opener_b.open_answer(answer_b).status == 200


def test_answers_of_one_channel_cannot_be_swapped_or_spliced(key: SessionKey) -> None:
    channel = channel_to(key)
    a, b = sealed(key, channel, seq=None), sealed(key, channel, seq=None)
    answer_a = json.loads(open_request(a.envelope, PATH, key).sealer.answer(200, "a/b", b"A"))
    answer_b = json.loads(open_request(b.envelope, PATH, key).sealer.answer(200, "a/b", b"B"))
    refused(lambda: a.opener.open_answer(json.dumps(answer_b).encode()))
    for nonce in (answer_a["response_nonce"], answer_b["response_nonce"]):
        spliced = {**answer_a, "response_nonce": nonce, "chunks": [answer_a["chunks"][0], answer_b["chunks"][1]]}
        refused(lambda: a.opener.open_answer(json.dumps(spliced).encode()))
    assert a.opener.open_answer(json.dumps(answer_a).encode()).body == b"A"


def test_a_head_that_is_not_the_documented_json_is_refused(key: SessionKey) -> None:
    opener, sealer = answer_for(key)
    chunk = seal_chunk(sealer.keys, 0, b'{"status":"200"}', True)
    envelope = {"zml_sealed": SEALED_VERSION, "response_nonce": b64url(sealer.response_nonce), "chunks": [b64url(chunk)]}
    refused(lambda: opener.open_answer(json.dumps(envelope).encode()))


# --- The stream -------------------------------------------------------------------------------

EVENTS = [
    b'data: {"choices":[{"delta":{"content":"Hel"}}]}\n\n',
    b'data: {"choices":[{"delta":{"content":"lo"}}]}\n\n',
    b"data: [DONE]\n\n",
]


def stream_text(sealer: ResponseSealer, events: list[bytes] = EVENTS) -> list[str]:
    return [sealer.stream_head()] + [sealer.stream_event(e) for e in events] + [sealer.stream_end()]


def read_lines(opener: ResponseOpener, text: str) -> list[StreamPart]:
    reader = opener.stream_reader()
    parts = reader.feed(text.split("\n"))
    reader.finish()
    return parts


@pytest.mark.parametrize("suite", SUITE_NAMES)
def test_a_stream_round_trips_line_by_line_and_in_any_byte_split(
    key: SessionKey, suite: str
) -> None:
    opener, sealer = answer_for(key, suite=suite, stream=True)
    text = "".join(stream_text(sealer))
    parts = read_lines(opener, text)
    assert isinstance(parts[0], StreamHead) and parts[0].head.status == 200
    assert parts[0].head.content_type == "text/event-stream"
    assert [p.data for p in parts[1:-1] if isinstance(p, StreamEvent)] == EVENTS
    assert isinstance(parts[-1], StreamEnd) and len(parts) == len(EVENTS) + 2
    # The same bytes, in random pieces and with CRLF line ends.
    rng = random.Random(7)
    for data in [text.encode(), text.replace("\n", "\r\n").encode()]:
        reader = opener.stream_reader()
        got: list[StreamPart] = []
        at = 0
        while at < len(data):
            step = rng.randint(1, 40)
            got += reader.push(data[at : at + step])
            at += step
        reader.finish()
        assert got == parts


def stream_refused(opener: ResponseOpener, events: list[str]) -> SealedResponseError:
    return refused(lambda: read_lines(opener, "".join(events)))


def test_reordered_dropped_or_altered_stream_chunks_are_refused(key: SessionKey) -> None:
    opener, sealer = answer_for(key, stream=True)
    good = stream_text(sealer)
    head, events, end = good[0], good[1:-1], good[-1]
    stream_refused(opener, [head, events[1], events[0], events[2], end])  # reordered
    stream_refused(opener, [head, events[0], events[2], end])  # dropped
    stream_refused(opener, [head] + events + [events[2], end])  # repeated
    stream_refused(opener, [events[0]] + events[1:] + [end])  # head dropped
    altered = "data: " + flip(events[1].removeprefix("data: ").strip()) + "\n\n"
    stream_refused(opener, [head, events[0], altered, events[2], end])
    # `event: final` is only a hint: stripped, or added to another chunk, nothing opens.
    stream_refused(opener, [head] + events + [end.replace("event: final\n", "")])
    stream_refused(opener, [head, "event: final\n" + events[0]] + events[1:] + [end])
    assert len(read_lines(opener, "".join(good))) == len(good)


def test_a_truncated_stream_is_refused_at_its_end(key: SessionKey) -> None:
    opener, sealer = answer_for(key, stream=True)
    good = stream_text(sealer)
    err = stream_refused(opener, good[:-1])
    assert "truncated" in err.message
    stream_refused(opener, good[:1])
    stream_refused(opener, [])


def test_nothing_may_follow_the_final_chunk(key: SessionKey) -> None:
    opener, sealer = answer_for(key, stream=True)
    good = stream_text(sealer)
    stream_refused(opener, good + [good[1]])
    stream_refused(opener, good + ["data: AAAA\n\n"])


def test_a_short_or_missing_response_nonce_is_refused(key: SessionKey) -> None:
    opener, sealer = answer_for(key, stream=True)
    err = stream_refused(opener, [f"data: {b64url(bytes(20))}\n\n"])
    assert "response nonce" in err.message
    stream_refused(opener, [f"data: {b64url(sealer.response_nonce)}\n\n"])


def test_an_unsealed_stream_is_refused(key: SessionKey) -> None:
    opener, _ = answer_for(key, stream=True)
    stream_refused(opener, [e.decode() for e in EVENTS])


def test_another_requests_stream_is_refused(key: SessionKey) -> None:
    opener_a, _ = answer_for(key, stream=True, seq=1)
    _, sealer_b = answer_for(key, stream=True, seq=2)
    stream_refused(opener_a, stream_text(sealer_b))


def test_a_chunk_moved_between_two_streams_of_one_channel_is_refused(key: SessionKey) -> None:
    channel = channel_to(key)
    requests = [sealed(key, channel, seq=None, stream=True) for _ in range(2)]
    wire_a, wire_b = (
        stream_text(open_request(r.envelope, PATH, key).sealer) for r in requests
    )
    opener = requests[0].opener
    assert len(read_lines(opener, "".join(wire_a))) == len(wire_a)
    for at in range(len(wire_a)):  # b's chunk at the same position of a: head, events, end
        moved = list(wire_a)
        moved[at] = wire_b[at]
        stream_refused(opener, moved)


def test_final_chunk_must_be_empty_and_not_the_head(key: SessionKey) -> None:
    opener, sealer = answer_for(key, stream=True)
    head = sealer.stream_head()
    final = seal_chunk(sealer.keys, 1, b"data: extra\n\n", True)
    stream_refused(opener, [head, f"event: final\ndata: {b64url(final)}\n\n"])
    opener2, sealer2 = answer_for(key, stream=True)
    head_final = seal_chunk(sealer2.keys, 0, b'{"status":200,"content_type":"x"}', True)
    data = b64url(sealer2.response_nonce + head_final)
    stream_refused(opener2, [f"event: final\ndata: {data}\n\n"])


def test_gateway_error_events_and_comments_pass_through(key: SessionKey) -> None:
    opener, sealer = answer_for(key, stream=True)
    good = stream_text(sealer)
    error = 'event: error\ndata: {"error":{"code":"stream_interrupted","message":"cut"}}\n\n'
    reader = opener.stream_reader()
    parts = reader.feed("".join([": keep-alive\n\n", good[0], good[1], error]).split("\n"))
    assert isinstance(parts[0], StreamHead) and isinstance(parts[1], StreamEvent)
    assert isinstance(parts[2], GatewayError) and "stream_interrupted" in parts[2].data
    with pytest.raises(SealedResponseError):
        reader.finish()
