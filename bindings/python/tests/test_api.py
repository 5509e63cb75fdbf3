"""The Python API's own behaviour (memory:// unless said): arguments, exceptions, guards,
context managers, waiting with the GIL released, Ctrl-C."""

import os
import signal
import threading
import time

import pytest

import locksmith


@pytest.fixture
def client():
    return locksmith.connect(f"memory://api-{os.getpid()}-{time.monotonic_ns()}", ttl=2.0)


def test_a_with_block_holds_the_lock_and_releases_it(client, name):
    with client.lock(name, timeout=5) as guard:
        assert guard.is_held() and guard.token > 0 and guard.name == name
        assert guard.fencing_token == guard.token
        assert 0 < guard.remaining() <= 2.0
        assert not guard.lost.is_set()
        assert client.try_lock(name) is None
    assert not guard.is_held() and guard.remaining() == 0.0
    again = client.try_lock(name)
    assert again is not None and again.token > guard.token
    assert again.unlock() is True
    assert again.unlock() is False, "a second unlock releases nothing"


def test_every_error_kind_is_a_typed_exception(client, name):
    with pytest.raises(locksmith.InvalidName):
        client.lock("", timeout=1)
    with pytest.raises(locksmith.InvalidUrl) as e:
        locksmith.connect("gopher://app:s3cret@x")
    assert "s3cret" not in str(e.value), "errors never echo a password"
    with pytest.raises(locksmith.InvalidTtl):
        locksmith.connect("memory://", ttl=0.0)
    with pytest.raises(locksmith.InvalidArgument):
        client.lock(name, timeout=-1)
    with pytest.raises(locksmith.InvalidArgument):
        client.lock(name, shared=True, permits=2)
    with pytest.raises(ValueError):
        client.lock(name, owner="")
    held = client.lock(name)
    with pytest.raises(locksmith.LockTimeout) as timeout:
        client.lock(name, timeout=0.2)
    assert isinstance(timeout.value, TimeoutError) and isinstance(timeout.value, locksmith.LocksmithError)
    held.unlock()
    with pytest.raises(locksmith.Unavailable) as down:
        locksmith.connect("locksmith://127.0.0.1:1").lock(name, timeout=5)
    assert isinstance(down.value, ConnectionError)


def test_a_lost_hold_raises_lock_lost_when_the_block_ends(client, name):
    with pytest.raises(locksmith.LockLost):
        with client.lock(name) as guard:
            client.close()  # the session ends: every hold is lost
            assert guard.lost.wait(5)
            assert not guard.is_held()
    # A hold the block released itself is no loss.
    with client.lock(name) as guard:
        assert guard.unlock()
    # An exception of the block itself wins over LockLost.
    with pytest.raises(KeyError):
        with client.lock(name):
            client.close()
            raise KeyError("mine")


def test_on_lost_callbacks_run_once_on_loss_and_never_after_a_release(client, name):
    fired = []
    guard = client.lock(name)
    guard.on_lost(lambda: fired.append("first"))
    client.close()
    assert guard.lost.wait(5)
    deadline = time.monotonic() + 5
    while not fired and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fired == ["first"]
    guard.on_lost(lambda: fired.append("late"))  # already lost: called at once
    assert fired == ["first", "late"]
    released = client.lock(name)
    released.on_lost(lambda: fired.append("released"))
    released.unlock()
    time.sleep(0.2)
    assert "released" not in fired
    assert released.lost.is_set(), "a released hold is no longer held"


def test_shared_holds_permits_reentrancy_and_values(client, name):
    r1, r2 = client.lock(name, shared=True), client.lock(name, shared=True)
    assert client.try_lock(name) is None, "no writer while readers hold"
    r1.unlock(), r2.unlock()
    sem = f"{name}-sem"
    p1, p2 = client.lock(sem, permits=2), client.lock(sem, permits=2)
    assert client.try_lock(sem, permits=2) is None
    assert {h.mode for h in client.status(sem).holders} == {"permit"}
    p1.unlock(), p2.unlock()
    outer = client.lock(name, owner="job-7", value="v")
    inner = client.lock(name, owner="job-7", value="v", timeout=1)
    assert inner.token == outer.token
    inner.unlock()
    assert outer.is_held() and client.status(name).holder.value == "v"
    outer.unlock()
    assert client.status(name).holder is None


def test_lock_all_takes_every_lock_or_none(client, name):
    a, b = f"{name}/a", f"{name}/b"
    with client.lock_all([b, a], timeout=5) as both:
        assert both.names == [a, b] and set(both.tokens) == {a, b}
        assert both.is_held() and both.remaining() > 0
        assert client.try_lock(a) is None
    blocker = client.lock(b)
    with pytest.raises(locksmith.LockTimeout):
        client.lock_all([a, b], timeout=0.3)
    assert client.try_lock(a).unlock(), "what lock_all took is released when it gives up"
    blocker.unlock()


def test_waiting_releases_the_gil(client, name):
    held = client.lock(name)
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.01)

    t = threading.Thread(target=tick)
    t.start()
    with pytest.raises(locksmith.LockTimeout):
        client.lock(name, timeout=0.5)
    stop.set()
    t.join()
    assert len(ticks) >= 20, "another thread ran while lock() waited"
    held.unlock()


def test_ctrl_c_while_waiting_raises_keyboard_interrupt_and_leaves_no_waiter(waiter_url, name):
    client = locksmith.connect(waiter_url, ttl=2.0)
    held = client.lock(name, timeout=10)
    threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        client.lock(name)
    assert time.monotonic() - started < 3
    deadline = time.monotonic() + 5
    while client.status(name).waiters != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.status(name).waiters == 0
    held.unlock()
    assert client.try_lock(name).unlock(), "nothing of the interrupted attempt holds the lock"
    client.close()


def test_status_of_a_lock_nobody_used_is_free(client, name):
    s = client.status(name)
    assert s.name == name and s.holder is None and s.holders == [] and s.last_token == 0
    assert isinstance(client.status(), list)


def test_a_guard_dropped_without_unlock_is_released(client, name):
    import gc

    client.lock(name)  # never kept
    gc.collect()
    deadline = time.monotonic() + 5
    while client.status(name).holder is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert client.status(name).holder is None
    assert client.try_lock(name).unlock()
