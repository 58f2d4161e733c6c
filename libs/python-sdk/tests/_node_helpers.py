"""TEST ONLY: the repository's TypeScript, run by Node as long-lived JSON-lines helpers (one
request per line in, one answer per line out), for the pure unit tests. Needs no gateway.

- ``quote_maker``: TDX quotes from the synthetic test PKI (``tests/make_test_quote.ts``,
  ``@zml/tdx/testing``), so a test can ask for a quote bound to a nonce it only learns at run
  time;
- ``seal_interop``: the TypeScript sealed channel (``tests/seal_interop.ts``, ``@zml/seal``),
  to check the Python one against it."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent


def node_binary() -> str:
    """The workspace's own Node 24 (the ``node`` devDependency), as the stack uses."""
    candidates = [
        os.environ.get("ZML_TEST_NODE"),
        str(REPO / "node_modules" / "node" / "bin" / "node"),
        str(REPO / "node_modules" / ".bin" / "node"),
    ]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return candidate
    raise RuntimeError("no Node 24 binary: set ZML_TEST_NODE or install the workspace")


class JsonLinesHelper:
    """A Node script answering one JSON line per JSON line; ``call(**request)``."""

    def __init__(self, script: str) -> None:
        self._script = script
        self._proc = subprocess.Popen(
            [node_binary(), str(HERE / script)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._lock = threading.Lock()

    def call(self, **request: Any) -> dict[str, Any]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        with self._lock:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        if not line:
            stderr = self._proc.stderr.read() if self._proc.stderr else ""
            raise RuntimeError(f"{self._script} ended: {stderr[-2000:]}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()


class QuoteMaker(JsonLinesHelper):
    def __init__(self) -> None:
        super().__init__("make_test_quote.ts")

    def make(self, **request: Any) -> dict[str, Any]:
        """A quote (see ``make_test_quote.ts`` for the fields)."""
        answer = self.call(**request)
        if "error" in answer:
            raise RuntimeError(f"make_test_quote.ts: {answer['error']}")
        return answer


@pytest.fixture(scope="session")
def quote_maker() -> Iterator[QuoteMaker]:
    maker = QuoteMaker()
    try:
        yield maker
    finally:
        maker.close()


@pytest.fixture(scope="session")
def seal_interop() -> Iterator[JsonLinesHelper]:
    helper = JsonLinesHelper("seal_interop.ts")
    try:
        yield helper
    finally:
        helper.close()
