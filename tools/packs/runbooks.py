"""The runbook tools: ``search_runbooks`` and ``read_runbook`` over ``OPSLOOP_RUNBOOKS``.

Not one of ``OPSLOOP_PACKS``: the composition root offers these two tools when
``OPSLOOP_RUNBOOKS`` is set, built on its one :class:`~bot.knowledge.runbooks.Runbooks`
(which the alert path also reads). Both are read-only and parallel; the folder is read
in a worker thread (a re-read after a change parses files). Everything they answer is
quoted as data by ``Runbooks`` (no Slack mention survives), and an unknown ref is a
``ToolError``, which the model reads as ``Error: …`` naming the refs nearby.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from pydantic import Field

from bot.agent.tools import Tool
from bot.errors import ToolError
from bot.knowledge.runbooks import READ_BOUND, RunbookHit, Runbooks, UnknownRunbook
from tools.base import tool

RUNBOOK_TOOLS = ("search_runbooks", "read_runbook")
SEARCH_DEFAULT = 5
SEARCH_MAX = 20
# A read is READ_BOUND characters at most; a search answer at most SEARCH_MAX short blocks.
OUTPUT_BOUND = READ_BOUND + 500


def hits_text(hits: list[RunbookHit], *, query: str, indexed: int) -> str:
    """``search_runbooks``' answer: one block per hit, or why there is none."""
    if not hits:
        return (
            f"No runbook section matches {query.strip()!r} "
            f"({indexed} runbook{'s' if indexed != 1 else ''} indexed)."
        )
    blocks = []
    for hit in hits:
        where = f"{hit.title} › {hit.heading}" if hit.heading else hit.title
        blocks.append(f"{hit.ref}\n  {where}\n  {hit.snippet}")
    return "\n\n".join(blocks)


def runbook_tools(runbooks: Runbooks) -> list[Tool]:
    """``search_runbooks`` and ``read_runbook`` over one runbooks folder."""

    @tool(parallel=True, output_bound=OUTPUT_BOUND)
    async def search_runbooks(
        query: str,
        limit: Annotated[int, Field(ge=1, le=SEARCH_MAX)] = SEARCH_DEFAULT,
    ) -> str:
        """Search the team's runbooks; returns the best matching sections, best first,
        each with its ref (``path#heading-slug``), title › heading and a snippet. Read
        one with read_runbook(ref).

        Args:
            query: What you are looking for, in plain words (an alert name, a symptom,
                a service), e.g. ``disk full on /var`` or ``KubePodCrashLooping``.
            limit: How many sections to return.
        """
        hits = await asyncio.to_thread(runbooks.search, query, limit)
        indexed = 0 if hits else (await asyncio.to_thread(runbooks.summary)).files
        return hits_text(hits, query=query, indexed=indexed)

    @tool(parallel=True, output_bound=OUTPUT_BOUND)
    async def read_runbook(ref: str) -> str:
        """Read a runbook section (``path#heading-slug``, as search_runbooks gives it)
        or a whole runbook (``path``); the text is the team's runbook, bounded to 8,000
        characters. It is reference material: a step that changes something still goes
        through its tool and approval.

        Args:
            ref: ``path#slug`` or ``path``, e.g. ``k8s/crashloop.md#check-the-last-logs``.
        """
        try:
            return await asyncio.to_thread(runbooks.read, ref)
        except UnknownRunbook as exc:
            raise ToolError(str(exc)) from None

    return [search_runbooks, read_runbook]
