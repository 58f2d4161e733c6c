"""The sync client against a real gateway: routing as the nodes saw it, streams, typed
errors and batch jobs (tier-4 sessions, which are sealed: ``test_sealed_sessions.py``)."""

from __future__ import annotations

import secrets
import socket
from collections.abc import Iterator

import pytest

import zml
from conftest import Stack

MESSAGES = [{"role": "user", "content": "Say hello"}]


@pytest.fixture
def client(stack: Stack) -> Iterator[zml.ZML]:
    with zml.ZML(base_url=stack.base_url, api_key=stack.api_key, timeout=30) as c:
        yield c


def test_infer_routing_names_the_node_that_received_the_payload(
    stack: Stack, client: zml.ZML
) -> None:
    for policy, family in [("interactive", "H100"), ("mi300x-first", "MI300X")]:
        before = stack.payloads()
        response = client.infer(model=stack.model, messages=MESSAGES, policy=policy)
        assert stack.receivers(before) == {response.routing.node: 1}
        assert response.routing.family == family
        assert response.routing.policy == policy
        assert response.routing.tier == 1 and response.routing.attempts == 1
        assert response.routing.decision_id
        assert response.choices[0].message.content
        assert response.request_id


def test_chat_completions_create_sends_zml_fields(stack: Stack, client: zml.ZML) -> None:
    before = stack.payloads()
    response = client.chat.completions.create(
        model=stack.model,
        messages=MESSAGES,
        accelerator_hint="MI300X",
        models=[stack.model],
        max_tokens=8,
    )
    assert stack.receivers(before) == {"mi300x-a": 1}
    assert response.routing.node == "mi300x-a"
    assert response.usage is not None and response.usage.completion_tokens > 0


def test_stream_carries_routing_and_ends_with_done(stack: Stack, client: zml.ZML) -> None:
    before = stack.payloads()
    with client.chat.completions.create(
        model=stack.model, messages=MESSAGES, stream=True, policy="mi300x-first"
    ) as stream:
        assert stream.routing.node == "mi300x-a"
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text
    assert stack.receivers(before) == {"mi300x-a": 1}


def test_stream_error_event_raises_a_typed_error(stack: Stack, client: zml.ZML) -> None:
    with stack.fault("l40s-a", {"kind": "cut_stream", "afterChunks": 2}):
        stream = client.infer(model=stack.model, messages=MESSAGES, stream=True, policy="l40s-only")
        assert stream.routing.node == "l40s-a"
        received = []
        with pytest.raises(zml.StreamError) as caught:
            for chunk in stream:
                received.append(chunk)
    assert caught.value.code == "stream_interrupted"
    assert caught.value.routing == stream.routing
    assert 0 < len(received) <= 2


def test_errors_carry_status_code_and_field(stack: Stack, client: zml.ZML) -> None:
    with pytest.raises(zml.PermissionDeniedError) as denied:
        client.infer(model=stack.model, messages=MESSAGES, tier=3)
    assert (denied.value.status, denied.value.code, denied.value.param) == (
        403,
        "tier_not_allowed",
        "tier",
    )
    with pytest.raises(zml.NotFoundError) as unknown:
        client.infer(model="no-such-model", messages=MESSAGES)
    assert (unknown.value.code, unknown.value.param) == ("unknown_model", "model")
    with pytest.raises(zml.BadRequestError) as bad:
        client.infer(model=stack.model, messages=MESSAGES, temprature=0.5)
    assert bad.value.status == 400 and bad.value.param == "temprature"
    with pytest.raises(zml.AuthenticationError) as unauthorized:
        zml.ZML(base_url=stack.base_url, api_key="wrong-key").models.list()
    assert unauthorized.value.code == "unauthorized"


def test_rate_limit_error_says_when_to_retry(stack: Stack) -> None:
    limited = zml.ZML(base_url=stack.base_url, api_key=stack.limited_api_key)
    with pytest.raises(zml.RateLimitError) as caught:
        for _ in range(3):
            limited.infer(model=stack.model, messages=MESSAGES)
    assert caught.value.status == 429 and caught.value.code == "rate_limited"
    assert caught.value.retry_after is not None and caught.value.retry_after > 0


def test_unreachable_gateway_is_a_connection_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(zml.APIConnectionError):
        zml.ZML(base_url=f"http://127.0.0.1:{port}", api_key="k").models.list()


def test_models_list(stack: Stack, client: zml.ZML) -> None:
    assert stack.model in [m.id for m in client.models.list()]


def test_jobs_submit_get_and_results(stack: Stack, client: zml.ZML) -> None:
    job_id = f"py-{secrets.token_hex(8)}"
    before = stack.payloads()
    first = client.jobs.submit(model=stack.model, messages=MESSAGES, job_id=job_id)
    again = client.jobs.submit(model=stack.model, messages=MESSAGES, job_id=job_id)
    other = client.jobs.submit(model=stack.model, messages=MESSAGES, policy="mi300x-first")
    assert (first.job_id, first.duplicate, again.duplicate) == (job_id, False, True)
    finished = {j.job_id: j for j in client.jobs.results([job_id, other.job_id], timeout=60)}
    assert set(finished) == {job_id, other.job_id}
    for job in finished.values():
        assert job.status == "done" and job.result is not None
        assert job.result.http_status == 200 and job.result.routing is not None
        completion = job.result.completion()
        assert completion is not None and completion.choices[0].message.content
    assert finished[other.job_id].result.routing.node == "mi300x-a"  # type: ignore[union-attr]
    # Each job reached the node its result names, once: the duplicate did not run again.
    nodes = [j.result.routing.node for j in finished.values()]  # type: ignore[union-attr]
    assert stack.receivers(before) == {n: nodes.count(n) for n in nodes}
    assert client.jobs.get(job_id).status == "done"
    with pytest.raises(zml.NotFoundError):
        client.jobs.get("no-such-job")
