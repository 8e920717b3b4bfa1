"""The agent loop core: pure asyncio and pydantic, no Slack, Redis or HTTP.

Public surface: ``run`` over an ``AgentConfig``, the neutral message types, the ports
other layers implement, and the result/state types. See ``run.py`` for the order of
an iteration. Not here: anything that talks to the world (a model provider, Redis,
Slack) — the other rooms implement the ports; this room imports only ``bot.errors``
(``tests/test_layers.py``, ``tests/agent/test_core_is_pure.py``).
"""

from bot.agent.cancel import CancelToken
from bot.agent.config import AgentConfig, StopCheck, StopVerdict
from bot.agent.limits import Limits
from bot.agent.memory import InMemoryHistory
from bot.agent.messages import (
    AnyMessage,
    AssistantMessage,
    Message,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolMessage,
    ToolSpec,
    Usage,
    UserMessage,
)
from bot.agent.model_failure_recovery import RecoveryPolicy
from bot.agent.observe import InMemoryArtifacts
from bot.agent.ports import (
    Approved,
    CondenseResult,
    ConfirmRequest,
    Decision,
    Denied,
    Injected,
    Pending,
)
from bot.agent.run import run
from bot.agent.state import PendingApproval, RunResult, RunState, StopReason
from bot.agent.tools import CallContext, FunctionTool, Tool

__all__ = [
    "AgentConfig",
    "AnyMessage",
    "Approved",
    "AssistantMessage",
    "CallContext",
    "CancelToken",
    "CondenseResult",
    "ConfirmRequest",
    "Decision",
    "Denied",
    "FunctionTool",
    "InMemoryArtifacts",
    "InMemoryHistory",
    "Injected",
    "Limits",
    "Message",
    "ModelRequest",
    "ModelResponse",
    "Pending",
    "PendingApproval",
    "RecoveryPolicy",
    "RunResult",
    "RunState",
    "StopCheck",
    "StopReason",
    "StopVerdict",
    "Tool",
    "ToolCall",
    "ToolMessage",
    "ToolSpec",
    "Usage",
    "UserMessage",
    "run",
]
