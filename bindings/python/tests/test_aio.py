"""locksmith.aio: the same contract awaited; cancelling an awaiting task leaves no waiter."""

import asyncio
import os

import pytest

import locksmith
import locksmith.aio


def run(coro):
    return asyncio.run(coro)


def test_async_with_holds_and_releases(name):
    async def main():
        client = locksmith.aio.connect(f"memory://aio-{os.getpid()}", ttl=2.0)
        async with client.lock(name, timeout=5) as guard:
            assert guard.is_held()
            assert await client.try_lock(name) is None
            first = guard.token
        again = await client.lock(name, timeout=5)
        assert again.token > first
        assert await again.unlock_async() is True
        with pytest.raises(locksmith.LockTimeout):
            async with client.lock(name):
                await client.lock(name, timeout=0.2)
        async with client.lock_all([f"{name}/a", f"{name}/b"], timeout=5) as both:
            assert len(both.tokens) == 2
        assert (await client.status(name)).holder is None
        async with client.lock(name) as guard:
            assert await guard.unlock_async(), "a hold the block released itself is no loss"
        with pytest.raises(locksmith.LockLost):
            async with client.lock(name):
                await client.close()
        await client.close()

    run(main())


def test_lost_can_be_awaited(name):
    async def main():
        client = locksmith.aio.connect(f"memory://aio-lost-{os.getpid()}", ttl=2.0)
        guard = await client.lock(name)
        await client.close()
        await asyncio.wait_for(guard.lost.wait_async(), 5)
        assert not guard.is_held()

    run(main())


def test_a_cancelled_waiter_leaves_nothing(waiter_url, name):
    async def main():
        client = locksmith.aio.connect(waiter_url, ttl=2.0)
        held = await client.lock(name, timeout=10)
        task = asyncio.ensure_future(client.lock(name))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(100):
            if (await client.status(name)).waiters == 0:
                break
            await asyncio.sleep(0.05)
        assert (await client.status(name)).waiters == 0
        await held.unlock_async()
        assert (await client.try_lock(name)) is not None
        await client.close()

    run(main())


def test_a_thousand_waiters_cancelled_half_way_leave_no_waiter(servers, name):
    async def main():
        client = locksmith.aio.connect(servers.url("native"), ttl=10.0)
        holder = await client.lock(name, timeout=10)
        got = []

        async def waiter():
            guard = await client.lock(name)
            got.append(guard.token)
            await guard.unlock_async()

        tasks = [asyncio.ensure_future(waiter()) for _ in range(1000)]
        for _ in range(400):
            if (await client.status(name)).waiters == 1000:
                break
            await asyncio.sleep(0.05)
        assert (await client.status(name)).waiters == 1000
        await holder.unlock_async()
        while len(got) < 500:
            await asyncio.sleep(0.005)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert 500 <= len(got) < 1000
        assert got == sorted(got), "hand-offs in token order"
        status = None
        for _ in range(200):
            status = await client.status(name)
            if status.waiters == 0 and status.holder is None:
                break
            await asyncio.sleep(0.05)
        assert status.waiters == 0 and status.holder is None, f"left on the server: {status}"
        await client.close()

    run(main())


def test_an_unlock_whose_task_is_cancelled_at_once_still_releases(waiter_url, name):
    """The task awaiting `unlock_async()` is cancelled right after the call, mostly before the
    runtime began the release: the release still runs to its end and frees the lock. (It used
    to leave the hold on the backend for as long as the session lived: the hold stayed alive in
    the loss watcher, which only a begun release stopped.)"""

    async def main():
        client = locksmith.aio.connect(waiter_url, ttl=10.0)
        names = [f"{name}/{i}" for i in range(20)]
        guards = []  # kept alive: the release must not depend on a guard being dropped

        async def release(guard):
            return await guard.unlock_async()

        for n in names:
            guard = await client.lock(n, timeout=5)
            guards.append(guard)
            task = asyncio.ensure_future(release(guard))
            await asyncio.sleep(0)  # the task calls unlock_async() and awaits it
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        held = names
        for _ in range(100):
            held = [n for n in held if (await client.status(n)).holder is not None]
            if not held:
                break
            await asyncio.sleep(0.05)
        assert held == [], f"{len(held)} of {len(names)} locks still held after a cancelled unlock"
        assert not any(g.is_held() for g in guards)
        await client.close()

    run(main())


def test_works_on_a_fresh_loop_each_time(name):
    for _ in range(3):
        async def once():
            client = locksmith.aio.connect(f"memory://aio-loop-{os.getpid()}", ttl=2.0)
            async with client.lock(name, timeout=5):
                pass

        asyncio.run(once())


def test_campaign_and_observe(name):
    async def main():
        client = locksmith.aio.connect(f"memory://aio-elect-{os.getpid()}", ttl=2.0)
        leaders = client.observe(name)
        assert await leaders.__anext__() is None
        async with client.campaign(name, "me", timeout=5) as term:
            seen = await leaders.__anext__()
            assert seen.value == "me" and seen.term == term.token
        await client.close()

    run(main())
