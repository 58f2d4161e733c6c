"""The asyncio client against the real gateway: the same calls, awaited."""

from __future__ import annotations

import asyncio

import pytest

import zml
from conftest import Stack

MESSAGES = [{"role": "user", "content": "Say hello"}]


def test_async_infer_stream_and_errors(stack: Stack) -> None:
    async def scenario() -> None:
        async with zml.AsyncZML(base_url=stack.base_url, api_key=stack.api_key) as client:
            before = stack.payloads()
            answer = await client.chat.completions.create(
                model=stack.model, messages=MESSAGES, policy="mi300x-first"
            )
            assert answer.routing.node == "mi300x-a"
            async with await client.infer(
                model=stack.model, messages=MESSAGES, stream=True, policy="interactive"
            ) as stream:
                assert stream.routing.family == "H100"
                chunks = [c async for c in stream]
            assert chunks
            assert stack.receivers(before) == {"mi300x-a": 1, stream.routing.node: 1}
            with pytest.raises(zml.NotFoundError) as caught:
                await client.infer(model="no-such-model", messages=MESSAGES)
            assert caught.value.param == "model"
            receipt = await client.jobs.submit(model=stack.model, messages=MESSAGES)
            jobs = [j async for j in client.jobs.results([receipt.job_id], timeout=60)]
            assert [j.status for j in jobs] == ["done"]

    asyncio.run(scenario())


def test_async_stream_error_event_raises(stack: Stack) -> None:
    async def scenario() -> None:
        async with zml.AsyncZML(base_url=stack.base_url, api_key=stack.api_key) as client:
            stream = await client.infer(
                model=stack.model, messages=MESSAGES, stream=True, policy="a100-only"
            )
            assert stream.routing.node == "a100-a"
            with pytest.raises(zml.StreamError) as caught:
                async for _ in stream:
                    pass
            assert caught.value.routing == stream.routing

    with stack.fault("a100-a", {"kind": "cut_stream", "afterChunks": 1}):
        asyncio.run(scenario())
