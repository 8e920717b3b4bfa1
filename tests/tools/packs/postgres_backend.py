"""The postgres pack's server fixture: one primary and its streaming standby for the
whole session (``bot.emulator.postgres_server``, where the cluster, its roles, databases
and data are described), stopped at the end even when tests fail."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bot.emulator.postgres_server import PASSWORDS, PgCluster, free_port, start_cluster

__all__ = ["PASSWORDS", "PgCluster", "free_port", "pg_cluster", "start_cluster"]


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()
