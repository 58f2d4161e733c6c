"""TEST ONLY: a tiny gateway + TD on a real local socket (``http.server`` in a thread), for the
confidential-session unit tests: ``POST /v1/sessions`` answers with a test-PKI quote bound to
the client's nonce and a fresh session key (``tests/make_test_quote.ts``), ``GET
/v1/attestation`` publishes an allowlist, and ``POST /v1/chat/completions`` opens the sealed
request as the TD proxy would (``tests/_td_side.py``) and seals an answer back. ``faults``
makes it misbehave the ways a hostile gateway could."""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from _node_helpers import QuoteMaker
from _td_side import SessionKey, TdError, open_request

MEASUREMENT = {
    "mrtd": "a1" * 48,
    "rtmr0": "b0" * 48,
    "rtmr1": "b1" * 48,
    "rtmr2": "b2" * 48,
    "rtmr3": "b3" * 48,
}
NODE = "t4-a"
ROUTING = (
    'decision-id="d-1", node="t4-a", policy="confidential", family="H100", '
    "queue-depth=0, tier=4, attempts=1"
)
SEALED_REQUEST = "application/vnd.zml.sealed-request+json"
SEALED_RESPONSE = "application/vnd.zml.sealed-response+json"


@dataclass
class Received:
    envelope: dict[str, Any]
    content_type: str
    body: dict[str, Any] | None
    """What the TD opened; None when it refused the request."""


@dataclass
class FakeGateway:
    quotes: QuoteMaker
    url: str = ""
    faults: set[str] = field(default_factory=set)
    """``quote_other_nonce``, ``answer_other_nonce``, ``swap_session_key``, ``debug``,
    ``other_mrtd``, ``other_pki``, ``allowlist_missing``, ``allowlist_failing``,
    ``flip_chunk``, ``unsealed_200``, ``gateway_503``, ``inner_error``, ``truncate``,
    ``reorder``, ``stream_error_event``, ``swap_answer``, ``drop_final_event_name``,
    ``whole_for_stream``."""
    keys: dict[str, SessionKey] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    allowlist_requests: int = 0
    root_pem: str = ""
    _last_answer: bytes | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # --- the handlers' logic ---------------------------------------------------------------

    def create_session(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        key = SessionKey.generate()
        nonce = body["nonce"]
        quote_nonce = secrets.token_hex(32) if "quote_other_nonce" in self.faults else nonce
        request: dict[str, Any] = {
            "nonce": quote_nonce,
            "session_public_key": key.public_b64,
            "pki": "other" if "other_pki" in self.faults else "main",
            "debug": "debug" in self.faults,
        }
        if "other_mrtd" in self.faults:
            request["mrtd"] = "c4" * 48
        q = self.quotes.make(**request)
        published = key
        if "swap_session_key" in self.faults:
            published = SessionKey.generate()
        session_id = "ses-" + secrets.token_hex(16)
        self.keys[session_id] = published
        now = int(time.time() * 1000)
        return 201, {
            "object": "session",
            "session_id": session_id,
            "node_id": NODE,
            "model": body["model"],
            "tier": 4,
            "created_at": now,
            "expires_at": now + 1000 * int(body.get("ttl_s", 3600)),
            "attestation": {
                "quote_b64": q["quote_b64"],
                "nonce_hex": secrets.token_hex(32) if "answer_other_nonce" in self.faults else nonce,
                "session_public_key": published.public_b64,
                "tls_key_sha256": q["tls_key_sha256"],
                "measurement": {k: q[k] for k in MEASUREMENT},
                "tcb_status": None,
                "verified_at": now,
            },
        }

    def allowlist(self) -> dict[str, Any]:
        self.allowlist_requests += 1
        nodes: list[dict[str, Any]] = []
        if "allowlist_missing" not in self.faults:
            nodes.append(
                {
                    "node_id": NODE,
                    "tier": 4,
                    "models": ["llama-3.1-8b-instruct"],
                    "accelerator_family": "H100",
                    "measurement": MEASUREMENT,
                    "tcb_status": None,
                    "tls_key_sha256": "00" * 32,
                    "attested_at": "2026-01-01T00:00:00Z",
                    "valid_until": "2099-01-01T00:00:00Z",
                    "status": "failing" if "allowlist_failing" in self.faults else "attested",
                    "reason": None,
                    "revocation": None,
                }
            )
        return {"object": "allowlist", "generated_at": "2026-01-01T00:00:00Z", "nodes": nodes}


def _completion(text: str) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "llama-3.1-8b-instruct",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        }
    ).encode()


def _chunk(text: str) -> bytes:
    chunk = {"id": "c1", "model": "llama-3.1-8b-instruct", "choices": [{"index": 0, "delta": {"content": text}}]}
    return f"data: {json.dumps(chunk)}\n\n".encode()


def _handler(gw: FakeGateway) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(
            self,
            status: int,
            body: bytes,
            content_type: str = "application/json",
            routing: bool = False,
        ) -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.send_header("x-request-id", "req-1")
            if routing:
                self.send_header("x-zml-routing", ROUTING)
            self.end_headers()
            self.wfile.write(body)

        def _error(self, status: int, code: str, message: str, param: str | None = None) -> None:
            error = {"message": message, "type": "error", "param": param, "code": code}
            self._send(status, json.dumps({"error": error}).encode(), routing=True)

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("content-length", "0")))

        def do_GET(self) -> None:
            if self.path == "/v1/attestation":
                self._send(200, json.dumps(gw.allowlist()).encode())
            else:
                self._error(404, "not_found", "no such path")

        def do_DELETE(self) -> None:
            session_id = self.path.rsplit("/", 1)[-1]
            if session_id not in gw.keys or session_id in gw.deleted:
                self._error(404, "session_not_found", "no such session", "id")
                return
            gw.deleted.append(session_id)
            self.send_response(204)
            self.send_header("content-length", "0")
            self.end_headers()

        def do_POST(self) -> None:
            raw = self._body()
            if self.path == "/v1/sessions":
                status, answer = gw.create_session(json.loads(raw))
                self._send(status, json.dumps(answer).encode())
            elif self.path == "/v1/chat/completions":
                self._chat(raw)
            else:
                self._error(404, "not_found", "no such path")

        def _chat(self, raw: bytes) -> None:
            content_type = self.headers.get("content-type", "")
            envelope = json.loads(raw)
            record = Received(envelope=envelope, content_type=content_type, body=None)
            with gw._lock:
                gw.received.append(record)
            if content_type != SEALED_REQUEST:
                self._error(400, "sealed_body_required", "seal it", "body")
                return
            if "gateway_503" in gw.faults:
                self._error(503, "session_node_unavailable", "the session's node is gone")
                return
            key = gw.keys.get(envelope.get("session_id", ""))
            if key is None or envelope.get("session_id") in gw.deleted:
                self._error(404, "session_not_found", "no such session", "session_id")
                return
            try:
                with gw._lock:
                    opened = open_request(envelope, self.path, key)
            except TdError as err:
                if err.sealer is not None:
                    answer = err.sealer.answer(err.status, "application/json", err.body())
                    self._send(err.status, answer, SEALED_RESPONSE, routing=True)
                else:
                    self._send(err.status, err.body(), routing=True)
                return
            record.body = opened.json
            sealer = opened.sealer
            prompt = str(opened.json["messages"][-1]["content"])
            if "inner_error" in gw.faults:
                error = {"error": {"message": "bad temperature", "code": "invalid_request", "param": "temperature"}}
                answer = sealer.answer(400, "application/json", json.dumps(error).encode())
                self._send(400, answer, SEALED_RESPONSE, routing=True)
                return
            if "unsealed_200" in gw.faults:
                self._send(200, _completion("not sealed"), routing=True)
                return
            if envelope["stream"] and "whole_for_stream" in gw.faults:
                error = {"error": {"message": "no streams here", "code": "invalid_request", "param": "stream"}}
                answer = sealer.answer(400, "application/json", json.dumps(error).encode())
                self._send(400, answer, SEALED_RESPONSE, routing=True)
                return
            if not envelope["stream"]:
                answer = sealer.answer(200, "application/json", _completion(f"echo: {prompt}"))
                if "swap_answer" in gw.faults and gw._last_answer is not None:
                    answer, gw._last_answer = gw._last_answer, answer
                else:
                    gw._last_answer = answer
                if "flip_chunk" in gw.faults:
                    doc = json.loads(answer)
                    last = doc["chunks"][-1]
                    doc["chunks"][-1] = ("B" if last[0] == "A" else "A") + last[1:]
                    answer = json.dumps(doc).encode()
                self._send(200, answer, SEALED_RESPONSE, routing=True)
                return
            self._stream(sealer, prompt)

        def _stream(self, sealer: Any, prompt: str) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("x-request-id", "req-1")
            self.send_header("x-zml-routing", ROUTING)
            self.send_header("connection", "close")
            self.end_headers()
            events = [sealer.stream_head()]
            events += [sealer.stream_event(_chunk(w)) for w in ["echo: ", prompt]]
            events.append(sealer.stream_event(b"data: [DONE]\n\n"))
            end = sealer.stream_end()
            if "reorder" in gw.faults:
                events[1], events[2] = events[2], events[1]
            if "flip_chunk" in gw.faults:
                data = events[2].removeprefix("data: ")
                events[2] = "data: " + ("B" if data[0] == "A" else "A") + data[1:]
            if "stream_error_event" in gw.faults:
                events = events[:2]
                end = 'event: error\ndata: {"error":{"code":"stream_interrupted","message":"node broke"}}\n\n'
            if "truncate" in gw.faults:
                end = ""
            if "drop_final_event_name" in gw.faults:
                end = end.replace("event: final\n", "")
            for event in events + [end]:
                self.wfile.write(event.encode())
                self.wfile.flush()

    return Handler


def serve(gateway: FakeGateway) -> Iterator[FakeGateway]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(gateway))
    server.daemon_threads = True
    gateway.url = f"http://127.0.0.1:{server.server_address[1]}"
    gateway.root_pem = gateway.quotes.make()["root_pem"]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield gateway
    finally:
        server.shutdown()
        server.server_close()
