"""Tool definitions: the typed ``@tool`` base, tools.yml (command and http tools), the
built-in packs, MCP servers, and the catalogue with per-channel allowlists.

Every tool satisfies the agent core's ``bot.agent.tools.Tool`` protocol. Not here: the
store, turns or Slack (a tool learns of its call only through ``CallContext``), and the
``opsloop tools`` command (``bot.cli.tools``).
"""

from tools.base import PythonTool, tool

__all__ = ["PythonTool", "tool"]
