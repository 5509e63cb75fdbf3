"""Distributed locks with fencing tokens, one contract over every backend.

A binding of the Rust client (``locksmith`` crate): the same engine, renewal, loss signal,
fencing tokens and cancel safety as the Rust library and the ``locksmith`` CLI.

>>> import locksmith
>>> client = locksmith.connect("memory://doctest", ttl=10.0)
>>> with client.lock("jobs/nightly", timeout=30) as guard:
...     guard.is_held() and guard.token > 0
True
>>> client.try_lock("jobs/nightly").unlock()
True

Backends by URL: ``locksmith://host:port`` (the native server), ``memory://`` (in-process, for
tests), ``redis://``, ``redlock://``, ``etcd://``, ``zk://``, ``postgres://``, ``mysql://``,
``sqlite://path`` — the Rust crate's URL table, with every option. ``locksmith.aio`` has the
same API for asyncio.
"""

from ._native import (
    DEFAULT_TTL,
    Client,
    Guard,
    HolderStatus,
    Leader,
    LockStatus,
    LostEvent,
    MultiGuard,
    Observer,
    connect,
)
from .errors import (
    AuthError,
    BackendError,
    ConfigError,
    CorruptData,
    ForkError,
    InternalError,
    InvalidArgument,
    InvalidName,
    InvalidTtl,
    InvalidUrl,
    LimitExceeded,
    LocalIOError,
    LockLost,
    LocksmithError,
    LockTimeout,
    ProtocolError,
    SessionExpired,
    Unavailable,
    Unfenced,
    Unsupported,
)

__all__ = [
    "DEFAULT_TTL", "Client", "Guard", "HolderStatus", "Leader", "LockStatus", "LostEvent",
    "MultiGuard", "Observer", "connect",
    "AuthError", "BackendError", "ConfigError", "CorruptData", "ForkError", "InternalError",
    "InvalidArgument", "InvalidName", "InvalidTtl", "InvalidUrl", "LimitExceeded", "LocalIOError",
    "LockLost", "LocksmithError", "LockTimeout", "ProtocolError", "SessionExpired", "Unavailable",
    "Unfenced", "Unsupported",
]
