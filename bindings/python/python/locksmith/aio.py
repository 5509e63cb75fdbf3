"""locksmith for asyncio: the same API as ``locksmith``, awaited.

Runs on any running event loop (the Rust work happens on the module's own runtime threads).
Cancelling a task that awaits an acquisition drops the Rust future, exactly as in Rust: the
backend is left with no waiter, and a lock granted just as the task was cancelled is released.
Cancelling a task in ``await guard.unlock_async()`` (or while it leaves ``async with``) loses
only the answer: the release starts at the call and runs to its end, as ``Guard::unlock`` does.

>>> import asyncio, locksmith.aio
>>> async def main():
...     client = locksmith.aio.connect("memory://aio-doctest")
...     async with client.lock("jobs/nightly", timeout=30) as guard:
...         return guard.is_held()
>>> asyncio.run(main())
True
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Awaitable, Callable, Generator, Generic, Optional, Sequence, TypeVar

from . import _native
from ._native import Guard, Leader, LockStatus, MultiGuard

__all__ = ["Client", "connect", "Acquisition"]

G = TypeVar("G", Guard, MultiGuard)


class Acquisition(Generic[G]):
    """A pending acquisition: ``await`` it for the guard, or use it in ``async with`` (the
    guard is released at the end of the block; ``LockLost`` if it was lost meanwhile)."""

    def __init__(self, start: Callable[[], Awaitable[G]]) -> None:
        self._start = start
        self._guard: Optional[G] = None

    def __await__(self) -> Generator[Any, None, G]:
        return self._start().__await__()

    async def __aenter__(self) -> G:
        self._guard = await self._start()
        return self._guard

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        guard, self._guard = self._guard, None
        if guard is None:
            return False
        return await guard._aexit(exc_type is not None)


class Client:
    """A connection to one backend with one session; see ``locksmith.Client`` for every
    argument. Make one with ``locksmith.aio.connect``."""

    def __init__(self, native: _native.Client) -> None:
        self._native = native

    @property
    def sync(self) -> _native.Client:
        """The same client with the blocking API."""
        return self._native

    @property
    def ttl(self) -> float:
        return self._native.ttl

    def lock(self, name: str, **options: Any) -> Acquisition[Guard]:
        """Waits until ``name`` is ours: ``guard = await client.lock(name, timeout=5)`` or
        ``async with client.lock(name) as guard:``. Cancelling leaves no waiter."""
        return Acquisition(lambda: self._native.lock_async(name, **options))

    async def try_lock(self, name: str, **options: Any) -> Optional[Guard]:
        """The guard if ``name`` is free right now, else None."""
        return await self._native.try_lock_async(name, **options)

    def lock_all(self, names: Sequence[str], **options: Any) -> Acquisition[MultiGuard]:
        """Every lock of ``names`` or none (see ``locksmith.Client.lock_all``)."""
        return Acquisition(lambda: self._native.lock_all_async(list(names), **options))

    def campaign(self, name: str, value: str, *, timeout: Optional[float] = None) -> Acquisition[Guard]:
        """Waits until this client leads election ``name`` with proposal ``value``."""
        return Acquisition(lambda: self._native.campaign_async(name, value, timeout=timeout))

    async def observe(self, name: str) -> AsyncIterator[Optional[Leader]]:
        """Yields the leader of election ``name`` now and after every change (None: nobody)."""
        observer = await self._native.observe_async(name)
        while True:
            ended, leader = await observer.next_async()
            if ended:
                return
            yield leader

    async def status(self, name: str) -> LockStatus:
        """The status of lock ``name``."""
        return await self._native.status_async(name)

    async def close(self) -> None:
        """Ends the session: every guard is lost, every hold freed."""
        await self._native.close_async()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: Any) -> bool:
        await self.close()
        return False

    def __repr__(self) -> str:
        return repr(self._native).replace("locksmith.Client", "locksmith.aio.Client")


def connect(url: str, ttl: float = 10.0) -> Client:
    """The asyncio client for ``url`` (no I/O yet; see ``locksmith.connect``)."""
    return Client(_native.connect(url, ttl))
