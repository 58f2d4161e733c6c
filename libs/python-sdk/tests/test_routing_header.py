"""The `x-zml-routing` parser on its own: RFC 8941 dictionaries as the gateway sends them,
members it may add later, and malformed headers. The vectors in
libs/contracts/test/routing-header-vectors.json hold it to the gateway's TypeScript parser."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from zml import Routing, RoutingHeaderError, parse_routing_header
from zml._routing import parse_sf_dictionary

SENT = (
    'decision-id="01JDX", node="h100-a", policy="balanced", family="H100", '
    "queue-depth=2, tier=1, attempts=1"
)


def test_parses_what_the_gateway_sends() -> None:
    assert parse_routing_header(SENT) == Routing(
        decision_id="01JDX",
        node="h100-a",
        policy="balanced",
        family="H100",
        queue_depth=2,
        tier=1,
        attempts=1,
    )


def test_reads_the_expected_cached_tokens_when_prefix_affinity_applied() -> None:
    assert parse_routing_header(SENT).cached_tokens is None
    assert parse_routing_header(f"{SENT}, cached-tokens=1984").cached_tokens == 1984
    assert parse_routing_header(f'{SENT}, cached-tokens="x"').cached_tokens is None


def test_unescapes_strings() -> None:
    header = SENT.replace('node="h100-a"', r'node="a\"b\\c"')
    assert parse_routing_header(header).node == 'a"b\\c'


def test_ignores_members_and_parameters_added_later() -> None:
    header = f"{SENT};v=2, region=eu-west, cost=0.25, flags=(a b);x, cached, raw=:aGk=:"
    assert parse_routing_header(header).attempts == 1
    assert parse_sf_dictionary(header)["cached"] is True
    assert parse_sf_dictionary(header)["raw"] == b"hi"
    assert parse_sf_dictionary(header)["flags"] == ("a", "b")


@pytest.mark.parametrize(
    "header",
    [
        "",
        SENT.replace("tier=1", 'tier="1"'),
        SENT.replace(", attempts=1", ""),
        SENT + ",",
        SENT.replace('"h100-a"', '"h100-a'),
        SENT.replace(", ", " "),
        'Node="x"',
        SENT.replace("queue-depth=2", "queue-depth=1234567890123456"),
    ],
)
def test_rejects_malformed_headers(header: str) -> None:
    with pytest.raises(RoutingHeaderError):
        parse_routing_header(header)


VECTORS = json.loads(
    (
        Path(__file__).resolve().parents[2] / "contracts" / "test" / "routing-header-vectors.json"
    ).read_text(encoding="utf-8")
)
# The TypeScript names of the fields this SDK's Routing has; it has no price fields.
FIELDS = {
    "decisionId": "decision_id",
    "node": "node",
    "policy": "policy",
    "family": "family",
    "queueDepth": "queue_depth",
    "tier": "tier",
    "attempts": "attempts",
    "cachedTokens": "cached_tokens",
}


def _name(vector: dict[str, Any]) -> str:
    return str(vector["name"])


@pytest.mark.parametrize("vector", VECTORS["valid"], ids=_name)
def test_reads_the_shared_vectors(vector: dict[str, Any]) -> None:
    expected = {FIELDS[k]: v for k, v in vector["routing"].items() if k in FIELDS}
    assert dataclasses.asdict(parse_routing_header(vector["header"])) == {
        "cached_tokens": None,
        **expected,
    }


@pytest.mark.parametrize("vector", VECTORS["invalid"], ids=_name)
def test_refuses_the_shared_vectors(vector: dict[str, Any]) -> None:
    with pytest.raises(RoutingHeaderError):
        parse_routing_header(vector["header"])
