"""The store's fixtures (a real redis-server) for the turns tests."""

from tests.store.conftest import keys, redis, server, thread

__all__ = ["keys", "redis", "server", "thread"]
