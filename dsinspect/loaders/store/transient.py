"""Which storage errors are worth another try: the one predicate every retry loop asks.

Transient: timeouts, dropped or refused connections, short reads, HTTP 5xx, 408 and 429, object-store
throttling, and the errno values clients use for them (s3fs maps 503/SlowDown to EBUSY, 500 to
EREMOTEIO, an unknown server error to EIO). Everything else fails at once: a missing file, a refused
permission, a bad argument, a bug in our code. Client libraries are recognised by duck typing (their
status codes, error codes and class names), so none of them is imported here."""

from __future__ import annotations

import errno

from dsinspect.errors import DsinspectError

__all__ = ["is_transient"]

# Final answers from storage, whatever caused them.
_FINAL = (DsinspectError, FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError)
_ERRNOS = {errno.EIO, errno.EBUSY, errno.EAGAIN, errno.ETIMEDOUT, errno.ECONNRESET, errno.ECONNABORTED,
           errno.ECONNREFUSED, errno.EPIPE, errno.ENETDOWN, errno.ENETUNREACH, errno.ENETRESET, errno.EHOSTUNREACH,
           getattr(errno, "EREMOTEIO", 121)}
_STATUSES = {408, 429}  # request timeout, too many requests; and every 5xx
# Object-store error codes (S3, GCS, Azure) that mean "later", for clients that raise them untranslated.
_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests",
          "RequestTimeout", "InternalError", "ServiceUnavailable", "ServerBusy",
          "OperationTimedOut"}
# Transport failures of http.client, urllib3, requests, aiohttp and botocore, by class name (or a base's).
_NAMES = {"IncompleteRead", "IncompleteReadError", "ResponseStreamingError", "ClientPayloadError",
          "ClientConnectionError", "ServerDisconnectedError", "EndpointConnectionError", "ConnectionClosedError",
          "ReadTimeoutError", "ConnectTimeoutError", "ProtocolError", "ChunkedEncodingError", "RemoteDisconnected"}
_DEPTH = 8  # how far down a chain of `raise ... from` to look


def is_transient(exc: BaseException) -> bool:
    """Would the same read, tried again a little later, likely succeed? False for final answers
    (missing, forbidden, our own errors) and for anything not known to be a network or server hiccup."""
    if isinstance(exc, _FINAL):
        return False
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < _DEPTH:  # clients wrap the transport's error: s3fs sets __cause__
        if _hiccup(current):
            return True
        current, seen = current.__cause__, seen + 1
    return False


def _hiccup(exc: BaseException) -> bool:
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return True
    if isinstance(exc, OSError) and exc.errno in _ERRNOS:
        return True
    if any(cls.__name__ in _NAMES for cls in type(exc).__mro__):
        return True
    status, code = _http_status(exc), _error_code(exc)
    return (status is not None and (status >= 500 or status in _STATUSES)) or code in _CODES


def _http_status(exc: BaseException) -> int | None:
    """The HTTP status an exception carries: aiohttp's `.status`, requests' `.response.status_code`,
    botocore's `.response['ResponseMetadata']['HTTPStatusCode']`, else gcsfs' `.code`."""
    response = getattr(exc, "response", None)
    boto = response.get("ResponseMetadata", {}).get("HTTPStatusCode") if isinstance(response, dict) else None
    for value in (getattr(exc, "status", None), getattr(response, "status_code", None), boto):
        if isinstance(value, int) and 100 <= value < 600:
            return value
    value = getattr(exc, "code", None)  # asked last: aiohttp warns that its `.code` is deprecated
    return value if isinstance(value, int) and 100 <= value < 600 else None


def _error_code(exc: BaseException) -> str | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        return code if isinstance(code, str) else None
    return None
