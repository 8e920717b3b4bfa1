"""`opsloop check` fails a Redis older than 7.0 (Stop travels by sharded pub/sub)."""

from __future__ import annotations

import pytest

from bot.cli.check import too_old


@pytest.mark.parametrize(
    ("version", "old"),
    [
        ("redis 6.2.14", True),
        ("redis 5.0.7", True),
        ("redis 7.0.15", False),
        ("redis 7.2.4", False),
        ("redis 10.0.0", False),
        ("redis (version unknown)", False),
    ],
)
def test_redis_older_than_7_is_too_old(version: str, old: bool) -> None:
    assert too_old(version) is old
