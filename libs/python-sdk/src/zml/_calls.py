"""Each API operation as data: method, path, body and how to read the answer. The sync and
async clients run the same calls, so the two can never disagree about the protocol."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from ._core import Headers, Messages, body_of, completion_of, parse_json, request_parts
from ._models import ChatCompletion, Job, JobReceipt, Model, Session

T = TypeVar("T")


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    body: dict[str, Any] | None
    request_id: str | None
    read: Callable[[int, Headers, bytes], T]
    content: bytes | None = None
    """Bytes to send instead of ``body`` as JSON (a sealed envelope), of ``content_type``."""
    content_type: str | None = None
    stream: bool | None = None
    """Whether the answer streams, when ``body`` does not say (a sealed request)."""
    sealed: bool = False
    """The answer is sealed: an error status with a sealed body goes to ``read`` (the TD's
    own status is inside), not straight to the usual API error."""

    @property
    def streams(self) -> bool:
        if self.stream is not None:
            return self.stream
        return bool(self.body and self.body.get("stream") is True)

    def http_request(self, base_url: str, api_key: str) -> dict[str, Any]:
        """The arguments of ``httpx``'s ``build_request`` for this call to ``base_url``."""
        return {
            "method": self.method,
            "url": f"{base_url}{self.path}",
            **request_parts(api_key, self.request_id, self.body, self.content, self.content_type),
        }


def _read_object(cls: Any) -> Callable[[int, Headers, bytes], Any]:
    def read(status: int, headers: Headers, content: bytes) -> Any:
        body = parse_json(status, headers, content)
        return cls.from_json(body if isinstance(body, dict) else {})

    return read


def _routed(
    model: str,
    messages: Messages,
    stream: bool,
    policy: str | None,
    accelerator_hint: str | None,
    tier: int | None,
    session_id: str | None,
) -> dict[str, Any]:
    """The fields both inference calls share (``stream`` is sent only when true)."""
    return {
        "model": model,
        "messages": list(messages),
        "stream": True if stream else None,
        "policy": policy,
        "accelerator_hint": accelerator_hint,
        "tier": tier,
        "session_id": session_id,
    }


def infer(
    *,
    model: str,
    messages: Messages,
    stream: bool,
    policy: str | None,
    accelerator_hint: str | None,
    tier: int | None,
    fallback_models: Sequence[str] | None,
    sort: str | None,
    session_id: str | None,
    request_id: str | None,
    params: Mapping[str, Any],
) -> Call[ChatCompletion]:
    fields = {
        **_routed(model, messages, stream, policy, accelerator_hint, tier, session_id),
        "fallback_models": list(fallback_models) if fallback_models is not None else None,
        "sort": sort,
    }
    return Call("POST", "/v1/infer", body_of(fields, params), request_id, completion_of)


def chat(
    *,
    model: str,
    messages: Messages,
    stream: bool,
    policy: str | None,
    accelerator_hint: str | None,
    tier: int | None,
    models: Sequence[str] | None,
    provider: Mapping[str, Any] | None,
    session_id: str | None,
    request_id: str | None,
    params: Mapping[str, Any],
) -> Call[ChatCompletion]:
    fields = {
        **_routed(model, messages, stream, policy, accelerator_hint, tier, session_id),
        "models": list(models) if models is not None else None,
        "provider": dict(provider) if provider is not None else None,
    }
    return Call("POST", "/v1/chat/completions", body_of(fields, params), request_id, completion_of)


def _read_models(status: int, headers: Headers, content: bytes) -> list[Model]:
    body = parse_json(status, headers, content)
    data = body.get("data", []) if isinstance(body, dict) else []
    return [Model(id=str(m.get("id")), owned_by=str(m.get("owned_by", ""))) for m in data]


def list_models(request_id: str | None) -> Call[list[Model]]:
    return Call("GET", "/v1/models", None, request_id, _read_models)


def _read_receipt(status: int, headers: Headers, content: bytes) -> JobReceipt:
    body = parse_json(status, headers, content)
    return JobReceipt(
        job_id=str(body.get("job_id")),
        status=str(body.get("status")),
        duplicate=bool(body.get("duplicate")),
    )


def submit_job(
    *,
    model: str,
    messages: Messages,
    job_id: str | None,
    request_id: str | None,
    params: Mapping[str, Any],
) -> Call[JobReceipt]:
    request = body_of({"model": model, "messages": list(messages)}, params)
    body = body_of({"request": request, "job_id": job_id}, None)
    return Call("POST", "/v1/jobs", body, request_id, _read_receipt)


def get_job(job_id: str, request_id: str | None) -> Call[Job]:
    return Call("GET", f"/v1/jobs/{quote(job_id, safe='')}", None, request_id, _read_object(Job))


def create_session(
    *,
    model: str,
    policy: str | None,
    ttl_s: int | None,
    nonce: str | None,
    request_id: str | None,
) -> Call[Session]:
    body = body_of({"model": model, "policy": policy, "ttl_s": ttl_s, "nonce": nonce}, None)
    return Call("POST", "/v1/sessions", body, request_id, _read_object(Session))


def get_allowlist(request_id: str | None) -> Call[Any]:
    """The public allowlist of tier 3–4 nodes (``GET /v1/attestation``), as JSON."""
    return Call("GET", "/v1/attestation", None, request_id, parse_json)


def delete_session(session_id: str, request_id: str | None) -> Call[None]:
    return Call(
        "DELETE",
        f"/v1/sessions/{quote(session_id, safe='')}",
        None,
        request_id,
        lambda status, headers, content: None,
    )
