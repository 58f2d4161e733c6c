"""The ``x-zml-routing`` header: an RFC 8941 structured-field dictionary.

The gateway sends, on every answer that a routing decision produced::

    decision-id="01J…", node="h100-a", policy="balanced", family="H100",
    queue-depth=2, tier=1, attempts=1

The parser reads any RFC 8941 dictionary (parameters and inner lists are read and
ignored), so members the gateway adds later do not break older clients. It is held to the gateway's
own parser (TypeScript, through the ``structured-headers`` library) by the shared vectors in
``libs/contracts/test/routing-header-vectors.json``, read by ``tests/test_routing_header.py``.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass

ROUTING_HEADER = "x-zml-routing"

BareItem = str | int | float | bool | bytes
Member = BareItem | tuple[BareItem, ...]

_KEY = re.compile(r"[a-z*][a-z0-9_\-.*]*")
_TOKEN = re.compile(r"[A-Za-z*][A-Za-z0-9!#$%&'*+\-.^_`|~:/]*")
_NUMBER = re.compile(r"-?\d+(\.\d+)?")
_BYTES = re.compile(r":([A-Za-z0-9+/=]*):")


class RoutingHeaderError(ValueError):
    """The header is not a valid structured field, or lacks a routing member."""


@dataclass(frozen=True)
class Routing:
    """How the gateway routed one request (the parsed ``x-zml-routing`` header)."""

    decision_id: str
    """Routing decision id: look the decision up in tracing by it."""
    node: str
    """The node that received the payload."""
    policy: str
    """The routing policy applied."""
    family: str
    """The node's accelerator family, e.g. ``H100``."""
    queue_depth: int
    """The node's queue depth when the request was dispatched."""
    tier: int
    """The trust tier the request ran at (1-4)."""
    attempts: int
    """Dispatch attempts made (at most 3, retries and fallbacks together)."""
    cached_tokens: int | None = None
    """Prompt tokens the node was expected to hold in its prefix cache; ``None`` when prefix
    affinity did not apply (or the gateway predates it)."""


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def fail(self, why: str) -> RoutingHeaderError:
        return RoutingHeaderError(f"{why} at offset {self.at} of {self.text!r}")

    def peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""

    def skip(self, chars: str) -> None:
        while self.peek() and self.peek() in chars:
            self.at += 1

    def match(self, pattern: re.Pattern[str]) -> re.Match[str] | None:
        m = pattern.match(self.text, self.at)
        if m:
            self.at = m.end()
        return m

    def key(self) -> str:
        m = self.match(_KEY)
        if not m:
            raise self.fail("expected a key")
        return m.group()

    def bare_item(self) -> BareItem:
        ch = self.peek()
        if ch == '"':
            return self.string()
        if ch == "?":
            flag = self.text[self.at + 1 : self.at + 2]
            if flag not in ("0", "1"):
                raise self.fail("bad boolean")
            self.at += 2
            return flag == "1"
        if ch == ":":
            m = self.match(_BYTES)
            if not m:
                raise self.fail("bad byte sequence")
            return base64.b64decode(m.group(1))
        m = self.match(_NUMBER)
        if m:
            whole = m.group().lstrip("-").split(".")[0]
            if len(whole) > (12 if m.group(1) else 15):
                raise self.fail("number too long")
            return float(m.group()) if m.group(1) else int(m.group())
        m = self.match(_TOKEN)
        if m:
            return m.group()
        raise self.fail("expected a value")

    def string(self) -> str:
        self.at += 1  # opening quote
        out: list[str] = []
        while True:
            ch = self.peek()
            if not ch:
                raise self.fail("unterminated string")
            self.at += 1
            if ch == "\\":
                escaped = self.peek()
                if escaped not in ('"', "\\") or not escaped:
                    raise self.fail("bad escape")
                out.append(escaped)
                self.at += 1
            elif ch == '"':
                return "".join(out)
            elif not " " <= ch <= "~":
                raise self.fail("non-printable character in string")
            else:
                out.append(ch)

    def parameters(self) -> None:
        # Parameters qualify a value; no routing member uses them, so they are read past.
        while self.peek() == ";":
            self.at += 1
            self.skip(" ")
            self.key()
            if self.peek() == "=":
                self.at += 1
                self.bare_item()

    def member(self) -> Member:
        if self.peek() != "(":
            item = self.bare_item()
            self.parameters()
            return item
        self.at += 1
        items: list[BareItem] = []
        while True:
            self.skip(" ")
            if self.peek() == ")":
                self.at += 1
                self.parameters()
                return tuple(items)
            items.append(self.bare_item())
            self.parameters()
            if self.peek() not in (" ", ")"):
                raise self.fail("expected ' ' or ')' in inner list")


def parse_sf_dictionary(text: str) -> dict[str, Member]:
    """Parses an RFC 8941 dictionary; a key without a value is ``True``."""
    r = _Reader(text)
    out: dict[str, Member] = {}
    r.skip(" ")
    while r.peek():
        key = r.key()
        if r.peek() == "=":
            r.at += 1
            out[key] = r.member()
        else:
            out[key] = True
            r.parameters()
        r.skip(" \t")
        if not r.peek():
            break
        if r.peek() != ",":
            raise r.fail("expected ','")
        r.at += 1
        r.skip(" \t")
        if not r.peek():
            raise r.fail("trailing comma")
    return out


def parse_routing_header(text: str) -> Routing:
    """Parses an ``x-zml-routing`` header; raises :class:`RoutingHeaderError` if malformed."""
    members = parse_sf_dictionary(text)

    def string(key: str) -> str:
        value = members.get(key)
        if not isinstance(value, str):
            raise RoutingHeaderError(f"{ROUTING_HEADER}: missing string {key}")
        return value

    def integer(key: str) -> int:
        value = members.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise RoutingHeaderError(f"{ROUTING_HEADER}: missing integer {key}")
        return value

    def optional_integer(key: str) -> int | None:
        value = members.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    return Routing(
        decision_id=string("decision-id"),
        node=string("node"),
        policy=string("policy"),
        family=string("family"),
        queue_depth=integer("queue-depth"),
        tier=integer("tier"),
        attempts=integer("attempts"),
        cached_tokens=optional_integer("cached-tokens"),
    )
