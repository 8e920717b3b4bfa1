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
        self._args_model = args_model(spec.name, spec.params)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def description(self) -> str:
        return self.spec.description

    @property
    def category(self) -> Category:
        return self.spec.category

    @property
    def parallel(self) -> bool:
        return self.spec.parallel

    @property
    def timeout(self) -> float:
        return self.spec.timeout

    @property
    def output_bound(self) -> int:
        return self.spec.output_bound

    @property
    def args_model(self) -> type[BaseModel]:
        return self._args_model

    def values(self, args: BaseModel, ctx: CallContext) -> dict[str, Any]:
        """Template values: the validated arguments plus ``confirmed_by`` and
        ``idempotency_key`` (both empty during a dry run)."""
        values: dict[str, Any] = args.model_dump()
        values["confirmed_by"] = "" if ctx.dry_run else (ctx.confirmed_by or "")
        values["idempotency_key"] = "" if ctx.dry_run else ctx.idempotency_key
        return values

    async def execute(self, args: BaseModel, ctx: CallContext) -> str:
        raise NotImplementedError
