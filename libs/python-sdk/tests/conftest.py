"""A whole ZML gateway for the suite: ``test/support/serve-stack.ts`` (real nats-server,
the four services, simulated nodes on free ports) runs as a subprocess for the session.
It stops when its stdin closes, so it never outlives pytest."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

REPO = Path(__file__).resolve().parents[3]
STARTUP_TIMEOUT_S = 120


@dataclass(frozen=True)
class Stack:
    base_url: str
    api_key: str
    limited_api_key: str
    model: str
    nodes: dict[str, dict[str, Any]]
    info: dict[str, Any] = field(default_factory=dict)
    """The whole line the stack printed (fields beyond the ones above)."""

    def sealed_nodes(self) -> list[str]:
        """Tier-4 nodes behind a TD proxy that opens sealed requests (``"sealed": true``)."""
        return [n for n, v in self.nodes.items() if v.get("tier") == 4 and v.get("sealed") is True]

    def tdx_root_pem(self) -> str | None:
        """The trust anchor the stack's TDX quotes chain to (its test PKI's root), from
        ``tdx_root_pem`` or ``tdx_root_pem_file`` at the top level or on a sealed node."""
        places = [self.info, *(self.nodes[n] for n in self.sealed_nodes())]
        for place in places:
            if isinstance(place.get("tdx_root_pem"), str):
                return str(place["tdx_root_pem"])
            if isinstance(place.get("tdx_root_pem_file"), str):
                return Path(place["tdx_root_pem_file"]).read_text()
        return None

    def sim(self, node: str, method: str, path: str, body: Any = None) -> Any:
        """Calls a simulated node's control API (``/_sim/*``)."""
        # TEE nodes serve TLS with a self-signed key that their quotes bind: no CA vouches
        # for it, so the control calls do not verify it.
        url = f"{self.nodes[node]['url']}{path}"
        res = httpx.request(method, url, json=body, verify=False)
        res.raise_for_status()
        return res.json()

    def payloads(self) -> dict[str, int]:
        """Inference payloads each node has received, as counted by the node itself."""
        return {n: int(self.sim(n, "GET", "/_sim/stats")["payloads_received"]) for n in self.nodes}

    def receivers(self, before: dict[str, int]) -> dict[str, int]:
        """Which nodes received payloads since ``before``, and how many."""
        now = self.payloads()
        return {n: now[n] - before[n] for n in now if now[n] != before[n]}

    @contextlib.contextmanager
    def fault(self, node: str, fault: dict[str, Any]) -> Iterator[None]:
        """Injects a fault at one node for the block. Only the nodes kept for this
        (``l40s-a``, ``a100-a``, reached by the policies ``l40s-only``, ``a100-only``) get
        faults: a node that failed may sit out a while, and the others must stay usable."""
        self.sim(node, "PUT", "/_sim/fault", fault)
        try:
            yield
        finally:
            self.sim(node, "DELETE", "/_sim/fault")


def _node_binary() -> str:
    # The workspace's own Node 24 (the `node` devDependency), like every npm script.
    return os.environ.get("ZML_TEST_NODE") or str(REPO / "node_modules" / ".bin" / "node")


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    proc = subprocess.Popen(
        [_node_binary(), "support/serve-stack.ts"],
        cwd=REPO / "test",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    errors: list[str] = []

    def pump(source: IO[str] | None, sink: Callable[[str], None]) -> None:
        for line in source or ():
            sink(line)
        sink("")  # the process ended

    threading.Thread(target=pump, args=(proc.stdout, lines.put), daemon=True).start()
    threading.Thread(target=pump, args=(proc.stderr, errors.append), daemon=True).start()
    try:
        first = lines.get(timeout=STARTUP_TIMEOUT_S)
    except queue.Empty:
        proc.kill()
        raise RuntimeError(f"stack did not start:\n{''.join(errors)[-4000:]}")
    if not first.startswith("{"):
        proc.kill()
        raise RuntimeError(f"stack did not start: {first}\n{''.join(errors)[-4000:]}")
    info = json.loads(first)
    try:
        yield Stack(
            base_url=info["base_url"],
            api_key=info["api_key"],
            limited_api_key=info["limited_api_key"],
            model=info["model"],
            nodes=info["nodes"],
            info=info,
        )
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
