"""Suite-wide collection rules.

Under pytest-xdist (``make test``, ``--dist loadgroup``) a module whose tests share a
module-scoped fixture (a Redis Cluster, a Sentinel group, a Prometheus stack, a page
server) runs on one worker, in file order, as it does serially: split over workers, each
would start the fixture again, and tests written to follow one another (a failover, then
a check of the nodes it left) would meet the fixture in an order nobody wrote.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        shares = any(
            definition.scope in ("module", "package", "class")
            for definitions in info.name2fixturedefs.values()
            for definition in definitions
        )
        if shares:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
