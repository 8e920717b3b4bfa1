"""Model Context Protocol servers as a tool source (``mcp_servers:`` in tools.yml).

    schema.py      what a server says, made safe: names, descriptions, input schemas,
                   the argument model that validates against the server's schema
    connection.py  one server: connect (stdio or streamable HTTP), call, restart, close
    stdio.py       the stdio transport: the child in its own group, lines bounded
    tool.py        ``McpTool``: a ``bot.agent.tools.Tool`` whose execute is a tools/call;
                   its category from overrides and annotations; results as text
    load.py        every configured server connected and its tools built, at start-up

Only ``load.py`` is imported from outside (by ``tools.registry.connect_mcp``), and only
when ``mcp_servers`` is configured: without it nothing of the MCP SDK is imported.
"""
