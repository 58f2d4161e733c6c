"""ZML Python SDK: call the ZML gateway and see how each request was routed.

>>> from zml import ZML
>>> client = ZML(base_url="http://127.0.0.1:8080", api_key="...")
>>> response = client.infer(model="llama-3.1-8b-instruct", messages=[...])
>>> response.routing.node, response.routing.family, response.routing.decision_id
"""

from ._async_client import AsyncConfidentialSession, AsyncStream, AsyncZML
from ._attest import (
    INTEL_SGX_ROOT_CA_PEM,
    AttestationCheck,
    AttestationResult,
    verify_quote,
    verify_session_attestation,
)
from ._client import ZML, ConfidentialSession, Stream
from ._errors import (
    APIConnectionError,
    APITimeoutError,
    AttestationError,
    AuthenticationError,
    BadRequestError,
    InternalServerError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    SealedResponseError,
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
    "ConfidentialSession",
    "AsyncConfidentialSession",
    "AttestationCheck",
    "AttestationResult",
    "verify_quote",
    "verify_session_attestation",
    "INTEL_SGX_ROOT_CA_PEM",
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
    "SealedResponseError",
    "AttestationError",
]
