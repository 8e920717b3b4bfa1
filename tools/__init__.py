"""Tool definitions: the typed ``@tool`` base, tools.yml (command and http tools), the
catalogue with per-channel allowlists, and the ``opsloop tools`` CLI.

Every tool satisfies the agent core's ``bot.agent.tools.Tool`` protocol.
"""

from tools.base import PythonTool, tool

__all__ = ["PythonTool", "tool"]
