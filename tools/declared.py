"""A tool declared in tools.yml: its spec, its generated argument model and rights.

``CommandTool`` and ``HttpTool`` derive from it and implement ``execute``; together
they satisfy the agent core's ``Tool`` protocol.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from bot.agent.tools import CallContext, Category
from tools.params import args_model
from tools.spec import ToolSpecBase


class DeclaredTool:
    def __init__(self, spec: ToolSpecBase, *, source: str) -> None:
        self.spec = spec
        self.source = source  # the file it came from, for listings and logs
        # What the core reads of a tool (``bot.agent.tools.Tool``), as declared.
        self.name: str = spec.name
        self.description: str = spec.description
        self.category: Category = spec.category
        self.parallel: bool = spec.parallel
        self.timeout: float = spec.timeout
        self.output_bound: int = spec.output_bound
        self.args_model: type[BaseModel] = args_model(spec.name, spec.params)

    def values(self, args: BaseModel, ctx: CallContext) -> dict[str, Any]:
        """Template values: the validated arguments plus ``confirmed_by`` and
        ``idempotency_key`` (both empty during a dry run)."""
        values: dict[str, Any] = args.model_dump()
        values["confirmed_by"] = "" if ctx.dry_run else (ctx.confirmed_by or "")
        values["idempotency_key"] = "" if ctx.dry_run else ctx.idempotency_key
        return values

    async def execute(self, args: BaseModel, ctx: CallContext) -> str:
        raise NotImplementedError
