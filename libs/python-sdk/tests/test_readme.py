"""The README's examples, run verbatim, in order, against the real gateway. Between blocks
the test checks what the simulated nodes saw: `routing.node` must be the node that
received the payload."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import Stack

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", README.read_text(), flags=re.S | re.M)


def run(block: str, namespace: dict[str, Any]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, str(README), "exec"), namespace)
    return out.getvalue()


def test_readme_examples_run_unchanged(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZML_BASE_URL", stack.base_url)
    monkeypatch.setenv("ZML_API_KEY", stack.api_key)
    blocks = python_blocks()
    assert len(blocks) == 7, "README sections: first call, chat, stream, errors, batch, sessions, async"
    first_call, chat, streaming, errors, batch, sessions, async_block = blocks
    ns: dict[str, Any] = {"__name__": "readme"}

    before = stack.payloads()
    output = run(first_call, ns)
    routing = ns["response"].routing
    assert stack.receivers(before) == {routing.node: 1}
    assert routing.policy == "interactive" and routing.family == "H100"
    assert f"{routing.node} {routing.family} {routing.decision_id}" in output

    before = stack.payloads()
    run(chat, ns)
    # The accelerator hint steers the request to the MI300X node.
    assert stack.receivers(before) == {"mi300x-a": 1}
    assert ns["response"].routing.node == "mi300x-a"

    before = stack.payloads()
    output = run(streaming, ns)
    assert stack.receivers(before) == {ns["stream"].routing.node: 1}
    assert output.startswith(f"routed to {ns['stream'].routing.node}\n")
    assert "stream broke" not in output and len(output.splitlines()[1]) > 0

    before = stack.payloads()
    output = run(errors, ns)
    assert output.strip() == "403 tier_not_allowed tier"
    assert stack.receivers(before) == {}

    before = stack.payloads()
    output = run(batch, ns)
    lines = output.splitlines()
    assert len(lines) == 3 and all(" done " in line for line in lines)
    nodes = [line.split()[-1] for line in lines]
    assert sum(stack.receivers(before).values()) == 3
    assert set(nodes) <= set(stack.receivers(before))

    # The sealed-session block needs a TD proxy on a tier-4 node, and the stack's test root.
    if stack.sealed_nodes():
        root = stack.tdx_root_pem()
        assert root is not None, "sealed nodes but no tdx_root_pem in the stack's line"
        monkeypatch.setenv("ZML_TDX_ROOT_PEM", root)
        before = stack.payloads()
        output = run(sessions, ns)
        session = ns["session"]
        assert stack.nodes[session.node_id]["tier"] == 4
        assert stack.receivers(before) == {session.node_id: 1}
        assert ns["answer"].routing.node == session.node_id
        assert output.split()[:3] == [session.session_id, session.node_id, session.key_id]
    else:
        compile(sessions, str(README), "exec")  # at least valid Python

    before = stack.payloads()
    output = run(async_block, ns)
    assert sum(stack.receivers(before).values()) == 2
    assert output.splitlines()[0] in stack.receivers(before)
