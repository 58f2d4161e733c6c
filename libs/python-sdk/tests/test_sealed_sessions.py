"""Confidential (sealed) tier-4 sessions end to end, both clients against the real gateway
(``conftest.py``'s stack) with its TD proxies. Skipped only when the stack has no tier-4 node
marked ``"sealed": true``; the stack must then also say which root its quotes chain to
(``tdx_root_pem`` or ``tdx_root_pem_file``, at the top level or on the sealed node)."""

from __future__ import annotations

import asyncio

import pytest

import zml
from conftest import Stack

MESSAGES = [{"role": "user", "content": "Say hello"}]


@pytest.fixture
def sealed_stack(stack: Stack) -> Stack:
    if not stack.sealed_nodes():
        pytest.skip('the stack has no tier-4 node marked "sealed": true')
    return stack


@pytest.fixture
def root_pem(sealed_stack: Stack) -> str:
    root = sealed_stack.tdx_root_pem()
    assert root is not None, (
        "the stack has sealed tier-4 nodes but does not say which root their quotes chain to: "
        "add tdx_root_pem (or tdx_root_pem_file) to serve-stack.ts's line"
    )
    return root


@pytest.fixture
def client(sealed_stack: Stack) -> zml.ZML:
    return zml.ZML(base_url=sealed_stack.base_url, api_key=sealed_stack.api_key, timeout=30)


def test_a_verified_session_seals_chats_and_streams(
    sealed_stack: Stack, client: zml.ZML, root_pem: str
) -> None:
    with client.sessions.create(sealed_stack.model, trusted_root_pem=root_pem, ttl_s=600) as session:
        assert session.node_id in sealed_stack.sealed_nodes()
        assert session.verification.ok, session.verification.reason
        assert session.expires_at - session.created_at == 600_000
        before = sealed_stack.payloads()
        for _ in range(2):  # seq 0 and 1: the TD's replay window takes both
            answer = session.chat.completions.create(messages=MESSAGES, max_tokens=16)
            assert answer.routing.node == session.node_id and answer.routing.tier == 4
            assert answer.choices and answer.choices[0].message.content
        with session.chat.completions.create(messages=MESSAGES, stream=True) as stream:
            assert stream.routing.node == session.node_id
            text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text
        assert sealed_stack.receivers(before) == {session.node_id: 3}
    # Closed: the session is gone, and so is its key.
    with pytest.raises(zml.NotFoundError) as gone:
        session.chat.completions.create(messages=MESSAGES)
    assert gone.value.code == "session_not_found"


def test_plain_requests_naming_a_session_are_refused(
    sealed_stack: Stack, client: zml.ZML, root_pem: str
) -> None:
    with client.sessions.create(sealed_stack.model, trusted_root_pem=root_pem) as session:
        with pytest.raises(zml.BadRequestError) as caught:
            client.chat.completions.create(
                model=sealed_stack.model, messages=MESSAGES, tier=4, session_id=session.session_id
            )
    assert caught.value.code == "sealed_body_required"


def test_a_session_that_does_not_verify_is_refused(
    sealed_stack: Stack, client: zml.ZML, root_pem: str
) -> None:
    with pytest.raises(zml.AttestationError) as unapproved:
        client.sessions.create(
            sealed_stack.model, trusted_root_pem=root_pem, approved_measurements=[{"mrtd": "00" * 48}]
        )
    assert unapproved.value.check == "measurements"
    with pytest.raises(zml.AttestationError) as intel:
        client.sessions.create(sealed_stack.model)  # the stack's quotes do not chain to Intel
    assert intel.value.check == "pck_chain"


def test_async_sealed_session(sealed_stack: Stack, root_pem: str) -> None:
    async def scenario() -> None:
        async with zml.AsyncZML(base_url=sealed_stack.base_url, api_key=sealed_stack.api_key) as c:
            async with await c.sessions.create(sealed_stack.model, trusted_root_pem=root_pem) as s:
                answers = await asyncio.gather(
                    *(s.chat.completions.create(messages=MESSAGES) for _ in range(3))
                )
                assert {a.routing.node for a in answers} == {s.node_id}
                stream = await s.chat.completions.create(messages=MESSAGES, stream=True)
                async with stream:
                    chunks = [chunk async for chunk in stream]
                assert chunks

    asyncio.run(scenario())
