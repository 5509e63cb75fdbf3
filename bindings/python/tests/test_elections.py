"""Elections: campaign, observe, leader — on the backends that offer them."""

import pytest

import locksmith

ELECTION_BACKENDS = ["memory", "native", "etcd", "zk"]


@pytest.fixture(params=ELECTION_BACKENDS)
def election_url(request, servers, tmp_path_factory):
    from conftest import backend_url

    return backend_url(request.param, servers, tmp_path_factory)


def test_campaign_observe_and_leader(election_url, name):
    a, b = locksmith.connect(election_url, ttl=2.0), locksmith.connect(election_url, ttl=2.0)
    observer = b.observe(name)
    assert observer.next(timeout=10) is None, "nobody leads yet"
    first = a.campaign(name, "10.0.0.1:80", timeout=10)
    seen = observer.next(timeout=10)
    assert seen.value == "10.0.0.1:80" and seen.term == first.token
    assert b.leader(name).value == "10.0.0.1:80"
    with pytest.raises(locksmith.LockTimeout):
        b.campaign(name, "10.0.0.2:80", timeout=0.3)
    first.unlock()
    second = b.campaign(name, "10.0.0.2:80", timeout=10)
    assert second.token > first.token
    while (seen := observer.next(timeout=10)) is None:
        pass
    assert seen.value == "10.0.0.2:80"
    second.unlock()
    a.close(), b.close()


def test_backends_without_elections_say_so(servers, tmp_path_factory, name):
    from conftest import backend_url

    client = locksmith.connect(backend_url("redis", servers, tmp_path_factory))
    with pytest.raises(locksmith.Unsupported):
        client.campaign(name, "x", timeout=1)
