"""The examples in the package's docstrings run."""

import doctest

import pytest

import locksmith
import locksmith.aio
import locksmith.errors


@pytest.mark.parametrize("module", [locksmith, locksmith.aio, locksmith.errors], ids=lambda m: m.__name__)
def test_docstring_examples_run(module):
    result = doctest.testmod(module, verbose=False)
    assert result.attempted > 0 and result.failed == 0


def test_every_public_name_has_a_docstring():
    for name in locksmith.__all__:
        obj = getattr(locksmith, name)
        if callable(obj) and not isinstance(obj, float):
            assert (obj.__doc__ or "").strip(), f"locksmith.{name} has no docstring"
    for method in ("lock", "try_lock", "lock_all", "campaign", "observe", "leader", "status", "close"):
        assert getattr(locksmith.Client, method).__doc__, method
