"""Exceptions of locksmith: one class per kind of ``locksmith::Error`` of the Rust crate.

Catch ``LocksmithError`` for all of them. Where a built-in exception means the same, the class
derives from it too: ``LockTimeout`` is a ``TimeoutError``, ``Unavailable`` a
``ConnectionError``, ``InvalidArgument`` a ``ValueError``.

>>> import locksmith
>>> issubclass(locksmith.LockTimeout, TimeoutError)
True
"""

__all__ = [
    "LocksmithError", "InvalidArgument", "InvalidName", "InvalidTtl", "InvalidUrl", "Unavailable",
    "ConfigError", "AuthError", "Unfenced", "Unsupported", "LockTimeout", "SessionExpired",
    "LockLost", "LimitExceeded", "CorruptData", "ProtocolError", "InternalError", "BackendError",
    "LocalIOError", "ForkError",
]


class LocksmithError(Exception):
    """Base class of every locksmith error."""


class InvalidArgument(LocksmithError, ValueError):
    """An argument is not acceptable (a duration, an owner id, an option)."""


class InvalidName(InvalidArgument):
    """The lock name is empty, too long or has control characters."""


class InvalidTtl(InvalidArgument):
    """The TTL is outside 0.1 s ..= 3600 s."""


class InvalidUrl(InvalidArgument):
    """The backend URL cannot be parsed, or names a backend this build does not have."""


class Unavailable(LocksmithError, ConnectionError):
    """The backend cannot be reached (refused, reset, no answer in time). Retrying may help."""


class ConfigError(LocksmithError):
    """The backend was reached but the configuration is wrong (TLS, certificates, files).
    Retrying changes nothing."""


class AuthError(LocksmithError, PermissionError):
    """The backend refused the credentials or the permission. Retrying changes nothing."""


class Unfenced(LocksmithError):
    """The backend cannot give a safe fencing token (Redlock); pass ``unfenced=True`` to lock
    without one."""


class Unsupported(LocksmithError):
    """The backend cannot offer what was asked (a semaphore, a read lock, an election)."""


class LockTimeout(LocksmithError, TimeoutError):
    """``lock(timeout=...)`` gave up waiting; nothing is left queued on the backend."""


class SessionExpired(LocksmithError):
    """The client's session (lease) expired or was closed; its holds are gone."""


class LockLost(LocksmithError):
    """The lock was lost while a ``with`` block ran: another holder may have overlapped it."""


class LimitExceeded(LocksmithError):
    """A server limit was hit (waiters per lock, sessions, message size)."""


class CorruptData(LocksmithError):
    """The server's data directory cannot be read safely."""


class ProtocolError(LocksmithError):
    """The server answered something this client does not understand."""


class InternalError(LocksmithError):
    """A bug in locksmith (never the caller's input); please report it."""


class BackendError(LocksmithError):
    """A backend-specific failure; the message names the backend."""


class LocalIOError(LocksmithError, OSError):
    """A local I/O error (files)."""


class ForkError(LocksmithError, RuntimeError):
    """A client, guard or observer was used in a process forked after it was made. Its session
    belongs to the parent: call ``locksmith.connect`` in the child."""
