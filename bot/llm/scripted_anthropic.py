"""Anthropic Messages rendering for the scripted model server (not built yet)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from bot.llm.scripted import Answer, ScriptedRequest, ScriptedServer


async def respond(
    server: ScriptedServer, request: web.Request, scripted: ScriptedRequest, answer: Answer
) -> web.StreamResponse:
    return web.json_response(
        {"type": "error", "error": {"type": "api_error", "message": "not implemented"}},
        status=501,
    )
