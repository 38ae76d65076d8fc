"""Which storage errors say the store cannot be reached or signed in to at all, whatever is asked: an
endpoint that refuses connections or does not resolve, no credentials to sign requests with. Nothing
dsinspect does next can succeed, so they become one StorageError line naming the store, its endpoint
and the cause (exit 2: fix the endpoint, the network or the credentials). Client libraries are
recognised by class name, as in store/transient.py, so none is imported here."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import fsspec

from dsinspect.errors import StorageError, reason_of

__all__ = ["access_error"]

_NO_CREDENTIALS = {"NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError", "ProfileNotFound",
                   "DefaultCredentialsError"}
_UNREACHABLE = {"EndpointConnectionError", "ConnectTimeoutError", "ProxyConnectionError", "ClientConnectorError",
                "ClientConnectorDNSError", "ServerTimeoutError"}


def access_error(exc: BaseException, where: str, fs: fsspec.AbstractFileSystem | None = None) -> StorageError | None:
    """`exc` as one StorageError line when it says the store behind `where` (e.g. "catalog s3://b/c")
    cannot be reached or signed in to: the endpoint (from the error, else from `fs`'s options) and the
    cause. None for any other error."""
    chain = _chain(exc)
    names = {cls.__name__ for e in chain for cls in type(e).__mro__}
    if names & _NO_CREDENTIALS:
        inner = _unwrapped(fs)
        s3 = inner is not None and _is_s3(inner)
        hint = ": set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE" if s3 else ""
        return StorageError(f"{where}: no credentials to sign requests to {_endpoint(chain, fs)} "
                            f"({_cause(chain)}){hint}")
    if names & _UNREACHABLE:
        return StorageError(f"{where}: cannot reach {_endpoint(chain, fs)}: {_cause(chain)}")
    return None


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and what it was raised from or while handling, outermost first (a few levels)."""
    out: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(out) < 8 and current not in out:
        out.append(current)
        current = current.__cause__ or current.__context__
    return out


def _endpoint(chain: list[BaseException], fs: fsspec.AbstractFileSystem | None) -> str:
    """The server asked: the URL a client error names (scheme and host), else `fs`'s endpoint option."""
    for e in chain:
        url = (getattr(e, "kwargs", None) or {}).get("endpoint_url")  # botocore keeps its message's fields
        if isinstance(url, str) and "://" in url:
            parts = urlsplit(url)
            return f"{parts.scheme}://{parts.netloc}"
    inner = _unwrapped(fs)
    configured = getattr(inner, "endpoint_url", None) or (getattr(inner, "client_kwargs", None) or {}).get(
        "endpoint_url")
    return configured or ("AWS's S3 endpoint" if inner is not None and _is_s3(inner) else "the store")


def _unwrapped(fs: fsspec.AbstractFileSystem | None) -> fsspec.AbstractFileSystem | None:
    """The filesystem under the fault injector's wrapper (--inject-faults), else `fs`."""
    return getattr(fs, "fs", None) if getattr(fs, "protocol", None) == "faulty" else fs


def _cause(chain: list[BaseException]) -> str:
    """The deepest system error's words ("Connection refused"), else the outermost error as one line."""
    for e in reversed(chain):
        if isinstance(e, OSError) and e.errno:
            return os.strerror(e.errno)
    return reason_of(chain[0])


def _is_s3(fs: fsspec.AbstractFileSystem) -> bool:
    protocol = getattr(fs, "protocol", ())
    return "s3" in (protocol if isinstance(protocol, tuple) else (protocol,))
