"""The exchanges both clients share (``zml._flows``) and the polling of ``jobs.results``
(``zml._polling``), without a network: a scripted transport answers each step, so the paths a
real gateway rarely takes (a lost connection halfway through ``sessions.create``, an answer
without routing) are checked in both clients at once."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

import zml
from zml import _calls, _confidential, _flows
from zml._flows import Close, Effect, Read, Send
from zml._models import Job
from zml._polling import JobWatch


class Script:
    """A transport that answers each ``Send`` with the next answer: ``(status, headers,
    body)``, or an exception to raise there. It records every step the flow asked for."""

    def __init__(self, *answers: tuple[int, dict[str, str], Any] | Exception) -> None:
        self._answers = list(answers)
        self._bodies: dict[int, bytes] = {}
        self.steps: list[Effect] = []

    def perform(self, effect: Effect) -> Any:
        self.steps.append(effect)
        if isinstance(effect, Send):
            answer = self._answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            status, headers, body = answer
            response = httpx.Response(status, headers=headers)
            self._bodies[id(response)] = json.dumps(body).encode()
            return response
        if isinstance(effect, Read):
            return self._bodies[id(effect.response)]
        return None

    def sent(self) -> list[tuple[str, str]]:
        return [(s.call.method, s.call.path) for s in self.steps if isinstance(s, Send)]


def _plan() -> _confidential.SessionPlan:
    """A session to open whose measurements come from the allowlist."""
    return _confidential.plan_session(
        model="m",
        approved_measurements=None,
        trusted_root_pem=None,
        policy=None,
        ttl_s=None,
        suite="x25519-sha256-chacha20poly1305",
        request_id=None,
    )


def test_a_session_whose_allowlist_cannot_be_read_is_deleted_before_the_error_is_raised() -> None:
    plan = _plan()
    lost = zml.APIConnectionError("cannot reach the gateway")
    script = Script((201, {}, {"session_id": "ses-1", "node_id": "n1"}), lost, (204, {}, None))
    with pytest.raises(zml.APIConnectionError) as caught:
        _flows.drive(_flows.open_session(plan, None, lambda channel: channel), script.perform)
    assert caught.value is lost
    assert script.sent() == [
        ("POST", "/v1/sessions"),
        ("GET", "/v1/attestation"),
        ("DELETE", "/v1/sessions/ses-1"),
    ]


def test_a_failed_delete_of_an_abandoned_session_keeps_the_first_error() -> None:
    plan = _plan()
    script = Script(
        (201, {}, {"session_id": "ses-1", "node_id": "n1"}),
        (200, {}, {"nodes": []}),  # the node is not on the allowlist
        (503, {}, {"error": {"code": "saturated", "message": "busy"}}),
    )
    with pytest.raises(zml.AttestationError) as caught:
        _flows.drive(_flows.open_session(plan, None, lambda channel: channel), script.perform)
    assert (caught.value.check, caught.value.session_id) == ("measurements", "ses-1")
    assert script.sent()[-1] == ("DELETE", "/v1/sessions/ses-1")


def test_a_stream_answer_without_routing_is_closed_and_refused() -> None:
    call = _calls.chat(
        model="m",
        messages=[],
        stream=True,
        policy=None,
        accelerator_hint=None,
        tier=None,
        models=None,
        provider=None,
        session_id=None,
        request_id=None,
        params={},
    )
    script = Script((200, {"content-type": "text/event-stream"}, None))
    flow = _flows.answer(call, None, lambda response, routing, decoder: "a stream")
    with pytest.raises(zml.ZmlAPIError) as caught:
        _flows.drive(flow, script.perform)
    assert caught.value.code == "invalid_response"
    assert isinstance(script.steps[-1], Close)


def test_an_error_answer_is_read_and_raised_typed() -> None:
    script = Script((404, {"x-request-id": "r-1"}, {"error": {"code": "unknown_job"}}))
    with pytest.raises(zml.NotFoundError) as caught:
        _flows.drive(_flows.run(_calls.get_job("j-1", None)), script.perform)
    assert (caught.value.code, caught.value.request_id) == ("unknown_job", "r-1")
    assert isinstance(script.steps[-1], Read)


def _job(job_id: str, status: str) -> Job:
    """A job as ``GET /v1/jobs/{id}`` answers it: a finished one carries its result."""
    result = {"outcome": "done", "http_status": 200} if status != "running" else None
    return Job.from_json({"job_id": job_id, "status": status, "result": result})


def test_a_job_watch_hands_out_each_job_once_as_it_finishes() -> None:
    watch = JobWatch(["a", "b", "a"], poll_interval=0.5, timeout=None, clock=lambda: 0.0)
    assert watch.round() == ["a", "b"]
    assert watch.finished("a", _job("a", "done"))
    assert not watch.finished("b", _job("b", "running"))
    assert watch.round() == ["b"] and watch.pause() == 0.5
    assert watch.finished("b", _job("b", "expired"))
    assert watch.pending == []


def test_a_job_watch_times_out_before_a_round_that_would_pass_the_deadline() -> None:
    now = [100.0]
    watch = JobWatch(["a"], poll_interval=2.0, timeout=5.0, clock=lambda: now[0])
    now[0] = 102.5
    assert watch.pause() == 2.0  # the next round starts at 104.5, before the deadline (105)
    now[0] = 103.5
    with pytest.raises(zml.APITimeoutError):
        watch.pause()
