"""How a failure of ``httpx`` below HTTP (no connection, a timeout, a connection cut) becomes
the SDK's error, alike in the sync and async clients."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from ._core import LineDecoder
from ._errors import APIConnectionError, APITimeoutError


def transport_error(err: httpx.HTTPError, root: str) -> APIConnectionError:
    if isinstance(err, httpx.TimeoutException):
        return APITimeoutError(f"no answer from {root} in time: {err}")
    return APIConnectionError(f"cannot reach {root}: {err}")


@contextmanager
def transport_errors(root: str) -> Iterator[None]:
    """Raises a failure to send a request or read its answer from ``root`` as
    :class:`APIConnectionError` (:class:`APITimeoutError` for a timeout)."""
    try:
        yield
    except httpx.HTTPError as err:
        raise transport_error(err, root) from err


@contextmanager
def stream_errors(decoder: LineDecoder) -> Iterator[None]:
    """Raises a failure while reading a stream as the decoder's :class:`StreamError`, which
    carries the routing: a stream that broke is a failed answer, not a lost connection."""
    try:
        yield
    except httpx.HTTPError as err:
        raise decoder.broken(err) from err
