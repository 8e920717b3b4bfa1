"""What every store over Redis is made of: ``RedisStore``, the client and the
deployment's keys it works with, and ``Lua``, how it declares the scripts it runs.

A store is a dataclass over ``RedisStore``: its fields are what it is given (the client
and the keys first, positionally, then its own options by keyword), so its constructor
holds only state. It names each script once, at class level (``_cas = Lua(_CAS)``),
next to the methods that run it. The script is registered with the instance's own
client (``self.redis``) the first time the instance uses it, and kept on the instance
from then on. Registering only computes the script's SHA1 (no round trip): ``EVALSHA``
is sent when the script runs, and its source when Redis does not know it yet (a
restart, a failover), as redis-py's ``AsyncScript`` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import overload

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

from bot.store.keys import Keys


@dataclass(eq=False)
class RedisStore:
    """A store of one Redis and one key prefix (compared by identity, like any client)."""

    redis: aioredis.Redis
    keys: Keys


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
    def __get__(self, store: RedisStore, owner: type | None = None) -> AsyncScript: ...
    def __get__(self, store: RedisStore | None, owner: type | None = None) -> Lua | AsyncScript:
        if store is None:
            return self
        script = store.redis.register_script(self.source)
        # Kept under the same name: the instance's own attribute is found before this
        # descriptor (it defines no __set__), so later uses are plain attribute reads.
        vars(store)[self._name] = script
        return script
