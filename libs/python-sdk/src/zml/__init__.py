"""ZML Python SDK: call the ZML gateway and see how each request was routed.

>>> from zml import ZML
>>> client = ZML(base_url="http://127.0.0.1:8080", api_key="...")
>>> response = client.infer(model="llama-3.1-8b-instruct", messages=[...])
>>> response.routing.node, response.routing.family, response.routing.decision_id
"""

from ._async_client import AsyncStream, AsyncZML
from ._client import Stream, ZML
from ._errors import (
    APIConnectionError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    InternalServerError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    ServiceUnavailableError,
    SessionExpiredError,
    StreamError,
    ZmlAPIError,
    ZmlError,
)
from ._models import (
    ChatCompletion,
    ChatCompletionChunk,
    Choice,
    ChunkChoice,
    Delta,
    Job,
    JobReceipt,
    JobResult,
    Message,
    Model,
    Session,
    SessionAttestation,
    Usage,
)
from ._routing import ROUTING_HEADER, Routing, RoutingHeaderError, parse_routing_header

__version__ = "0.1.0"

__all__ = [
    "ZML",
    "AsyncZML",
    "Stream",
    "AsyncStream",
    "Routing",
    "ROUTING_HEADER",
    "parse_routing_header",
    "RoutingHeaderError",
    "ChatCompletion",
    "ChatCompletionChunk",
    "Choice",
    "ChunkChoice",
    "Delta",
    "Message",
    "Usage",
    "Model",
    "Job",
    "JobReceipt",
    "JobResult",
    "Session",
    "SessionAttestation",
    "ZmlError",
    "ZmlAPIError",
    "APIConnectionError",
    "APITimeoutError",
    "BadRequestError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "SessionExpiredError",
    "RateLimitError",
    "InternalServerError",
    "ServiceUnavailableError",
    "StreamError",
]
