"""Choosing the client by topology (no server needed): what each ``OPSLOOP_REDIS_MODE``
requires, one line naming the variable when it is missing, and the client redis-py
builds from the URL (TLS, password, no retries)."""

from __future__ import annotations

import os
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import SSLConnection

from bot.errors import ConfigError
from bot.settings import load_bot_settings
from bot.store.connection import (
    RedisTarget,
    StoreUnavailable,
    connect,
    is_cluster,
    parse_sentinels,
    translated,
)

REDIS_VARS = (
    "REDIS_URL",
    "OPSLOOP_REDIS_MODE",
    "REDIS_SENTINELS",
    "REDIS_SENTINEL_MASTER",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in REDIS_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"OPSLOOP_REDIS_MODE": "sentinel"}, "REDIS_SENTINELS: required"),
        (
            {"OPSLOOP_REDIS_MODE": "sentinel", "REDIS_SENTINELS": "s1:26379"},
            "REDIS_SENTINEL_MASTER: required",
        ),
        ({"OPSLOOP_REDIS_MODE": "cluster"}, "REDIS_URL: required"),
        ({"OPSLOOP_REDIS_MODE": "cluster", "REDIS_URL": "unix:///tmp/r.sock"}, "REDIS_URL: a"),
        ({"REDIS_SENTINELS": "s1:26379,s2"}, "REDIS_SENTINELS: 's2' is not host:port"),
    ],
)
def test_each_mode_names_the_variable_it_lacks(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], message: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as caught:
        load_bot_settings()
    assert str(caught.value).startswith(message), str(caught.value)


def test_sentinel_mode_needs_no_redis_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPSLOOP_REDIS_MODE", "sentinel")
    monkeypatch.setenv("REDIS_SENTINELS", "s1:26379, s2:26380")
    monkeypatch.setenv("REDIS_SENTINEL_MASTER", "opsloop")
    target = RedisTarget.of(load_bot_settings())
    assert target == RedisTarget("redis://", "sentinel", "s1:26379, s2:26380", "opsloop")
    assert parse_sentinels(target.sentinels) == [("s1", 26379), ("s2", 26380)]
    assert "hunter2" not in target.where()


def test_standalone_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://:hunter2@db:6379/0")
    target = RedisTarget.of(load_bot_settings())
    assert (target.mode, target.url) == ("standalone", "redis://:hunter2@db:6379/0")
    assert target.where() == "db:6379"


async def test_cluster_mode_is_redis_pys_cluster_client_with_tls_and_the_password() -> None:
    client = connect(RedisTarget("rediss://:hunter2@node1:7000/0", mode="cluster"))
    try:
        assert is_cluster(client) and isinstance(client, RedisCluster)
        kwargs = client.connection_kwargs
        assert kwargs["connection_class"] is SSLConnection
        assert kwargs["password"] == "hunter2" and kwargs["decode_responses"] is True
        assert client.retry.get_retries() == 0  # no silent retries
    finally:
        await client.aclose()


async def test_sentinel_mode_asks_the_sentinels_and_takes_tls_and_password_from_the_url() -> None:
    client = connect(
        RedisTarget("rediss://:hunter2@ignored/2", "sentinel", "s1:26379,s2:26380", "opsloop")
    )
    try:
        assert not is_cluster(client)
        pool = client.connection_pool
        assert pool.service_name == "opsloop"  # type: ignore[attr-defined]
        kwargs = pool.connection_kwargs
        assert kwargs["password"] == "hunter2" and kwargs["db"] == 2
        assert issubclass(pool.connection_class, SSLConnection)
        sentinels = pool.sentinel_manager.sentinels  # type: ignore[attr-defined]
        assert [(s.connection_pool.connection_kwargs["host"]) for s in sentinels] == ["s1", "s2"]
    finally:
        await client.aclose()


def _raising_in(filename: str) -> Any:
    namespace: dict[str, Any] = {}
    exec(compile("def write():\n    None.writelines([])\n", filename, "exec"), namespace)  # noqa: S102
    return namespace["write"]


async def test_an_attribute_error_inside_redis_py_is_redis_unavailable() -> None:
    """redis-py 8.1 on a connection a failover closed under it raises AttributeError
    (``'NoneType' object has no attribute 'writelines'``): a Redis failure, retried and
    answered like one (503, takeover), not a crash. Ours stays a bug."""
    with pytest.raises(StoreUnavailable, match="writelines"):
        async with translated("receipt"):
            _raising_in(f"{os.sep}site-packages{os.sep}redis{os.sep}asyncio{os.sep}x.py")()
    with pytest.raises(AttributeError):
        async with translated("receipt"):
            _raising_in(f"{os.sep}work{os.sep}bot{os.sep}store{os.sep}x.py")()
