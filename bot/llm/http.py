"""The one shared ``httpx.AsyncClient`` per process for model calls."""

from __future__ import annotations

import httpx

from bot.settings import LLMSettings

KEEPALIVE_EXPIRY_S = 30.0


def make_http_client(settings: LLMSettings) -> httpx.AsyncClient:
    """Connection limits and connect/read/write/pool timeouts from the settings.

    The overall per-request bound is applied by each adapter around one attempt.
    """
    return httpx.AsyncClient(
        timeout=httpx.Timeout(
            connect=settings.connect_timeout_s,
            read=settings.read_timeout_s,
            write=settings.connect_timeout_s,
            pool=settings.connect_timeout_s,
        ),
        limits=httpx.Limits(
            max_connections=settings.max_connections,
            max_keepalive_connections=settings.max_connections,
            keepalive_expiry=KEEPALIVE_EXPIRY_S,
        ),
        follow_redirects=False,
        trust_env=False,
    )
