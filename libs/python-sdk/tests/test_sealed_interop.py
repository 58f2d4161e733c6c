"""The Python sealed channel against the TypeScript one (``@zml/seal``, run by Node through
``tests/seal_interop.ts``), both ways: a Python client's request opens in the TypeScript TD and
its sealed answers open in Python, and a TypeScript client's request opens in the Python TD
side with its answers opening in TypeScript. Pure unit tests: no gateway."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from _node_helpers import JsonLinesHelper, seal_interop  # noqa: F401 (the fixture)
from _td_side import SessionKey, open_request
from zml import SealedResponseError
from zml._sealed import SUITES, SealedChannel, SealedStreamReader, StreamEnd, StreamEvent, StreamHead

PATH = "/v1/chat/completions"
SESSION = "ses-" + "0123456789abcdef" * 2
EVENTS = [b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n', b"data: [DONE]\n\n"]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


def body(stream: bool) -> bytes:
    return json.dumps(
        {"model": "llama-3.1-8b-instruct", "stream": stream, "messages": [{"role": "user", "content": "é ✓"}]}
    ).encode()


@pytest.mark.parametrize("suite", list(SUITES))
@pytest.mark.parametrize("stream", [False, True])
def test_python_client_and_typescript_td(
    seal_interop: JsonLinesHelper, suite: str, stream: bool
) -> None:
    key = seal_interop.call(op="keypair")["session_public_key"]
    channel = SealedChannel(session_id=SESSION, session_public_key_b64=key, suite=suite)
    request = channel.seal(
        path=PATH,
        body=body(stream),
        model="llama-3.1-8b-instruct",
        stream=stream,
        seq=41,
        policy="interactive",
        max_tokens=64,
    )
    command: dict[str, Any] = {"op": "open", "envelope": request.envelope, "path": PATH}
    if stream:
        command["events"] = [b64(e) for e in EVENTS]
    else:
        command["answer"] = {"status": 201, "content_type": "application/json", "body": b64(b'{"ok":1}')}
    answer = seal_interop.call(**command)
    assert "error" not in answer, answer
    assert unb64(answer["body"]) == body(stream)
    if stream:
        reader: SealedStreamReader = request.opener.stream_reader()
        parts = reader.push(answer["sse"].encode())
        reader.finish()
        assert isinstance(parts[0], StreamHead) and parts[0].head.status == 200
        assert [p.data for p in parts if isinstance(p, StreamEvent)] == EVENTS
        assert isinstance(parts[-1], StreamEnd)
    else:
        opened = request.opener.open_answer(unb64(answer["sealed"]))
        assert (opened.status, opened.content_type, opened.body) == (201, "application/json", b'{"ok":1}')
    # The TypeScript TD refuses what the AAD does not bind, as the Python side does.
    changes: list[dict[str, Any]] = [{"seq": 42}, {"model": "other-model"}, {"stream": not stream}]
    for change in changes:
        altered = {**command, "envelope": {**request.envelope, **change}}
        assert seal_interop.call(**altered) == {"error": "sealed_request_rejected"}
    assert seal_interop.call(**{**command, "path": "/v1/completions"}) == {
        "error": "sealed_request_rejected"
    }


@pytest.mark.parametrize("suite", list(SUITES))
@pytest.mark.parametrize("stream", [False, True])
def test_typescript_client_and_python_td(
    seal_interop: JsonLinesHelper, suite: str, stream: bool
) -> None:
    key = SessionKey.generate()
    sealed = seal_interop.call(
        op="seal",
        input={
            "path": PATH,
            "body": b64(body(stream)),
            "model": "llama-3.1-8b-instruct",
            "sessionId": SESSION,
            "stream": stream,
            "seq": 3,
            "sessionPublicKey": key.public_b64,
            "suite": suite,
            "maxTokens": 5,
        },
    )
    assert "error" not in sealed, sealed
    assert json.loads(unb64(sealed["bytes"])) == sealed["envelope"]
    opened = open_request(sealed["envelope"], PATH, key)
    assert opened.body == body(stream)
    if stream:
        sealer = opened.sealer
        sse = sealer.stream_head() + "".join(sealer.stream_event(e) for e in EVENTS) + sealer.stream_end()
        parts = seal_interop.call(op="open_stream", id=sealed["id"], sse=sse)["parts"]
        assert parts[0] == {"kind": "head", "status": 200, "content_type": "text/event-stream"}
        assert [unb64(p["event"]) for p in parts[1:-1]] == EVENTS
        assert parts[-1] == {"kind": "end"}
        cut = sse[: sse.index("event: final")]
        assert seal_interop.call(op="open_stream", id=sealed["id"], sse=cut) == {
            "error": "sealed_response_invalid"
        }
    else:
        answer = opened.sealer.answer(200, "application/json", b'{"id":"x"}')
        got = seal_interop.call(op="open_answer", id=sealed["id"], answer=b64(answer))
        assert (got["status"], got["content_type"], unb64(got["body"])) == (
            200,
            "application/json",
            b'{"id":"x"}',
        )


def test_an_answer_to_another_typescript_request_is_refused_by_python(
    seal_interop: JsonLinesHelper,
) -> None:
    key = seal_interop.call(op="keypair")["session_public_key"]
    # Two requests of one channel: each answer opens only for its own.
    channel = SealedChannel(session_id=SESSION, session_public_key_b64=key)
    requests = [
        channel.seal(path=PATH, body=body(False), model="llama-3.1-8b-instruct", stream=False, seq=seq)
        for seq in (1, 2)
    ]
    answers = [
        seal_interop.call(
            op="open",
            envelope=r.envelope,
            path=PATH,
            answer={"status": 200, "content_type": "application/json", "body": b64(b"{}")},
        )
        for r in requests
    ]
    with pytest.raises(SealedResponseError):
        requests[0].opener.open_answer(unb64(answers[1]["sealed"]))
    assert requests[1].opener.open_answer(unb64(answers[1]["sealed"])).body == b"{}"
