"""``Lua``: how a store declares the Redis scripts it runs.

A store names each script once, at class level (``_cas = Lua(_CAS)``), next to its other
methods; its constructor then holds only state. The script is registered with the
instance's own Redis (``self._redis``) the first time the instance uses it, and kept on
the instance from then on. Registering only computes the script's SHA1 (no round trip):
``EVALSHA`` is sent when the script runs, and its source when Redis does not know it yet
(a restart, a failover), as redis-py's ``AsyncScript`` does.
"""

from __future__ import annotations

from typing import Protocol, overload

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript


class _Store(Protocol):
    _redis: aioredis.Redis


class Lua:
    """A store's Lua script: the instance's ``AsyncScript`` for ``source``."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, store: None, owner: type) -> Lua: ...
    @overload
    def __get__(self, store: _Store, owner: type | None = None) -> AsyncScript: ...
    def __get__(self, store: _Store | None, owner: type | None = None) -> Lua | AsyncScript:
        if store is None:
            return self
        script = store._redis.register_script(self.source)
        # Kept under the same name: the instance's own attribute is found before this
        # descriptor (it defines no __set__), so later uses are plain attribute reads.
        vars(store)[self._name] = script
        return script
