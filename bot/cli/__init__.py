"""The ``opsloop`` command line, one module per command.

``main`` declares every command and its flags and dispatches (the ``opsloop`` script and
``python -m bot`` both enter there); ``serve`` runs ``serve`` and ``socket``; ``dev`` the
local stack; ``trace`` reads back what a job did; ``check`` is the pre-flight checklist;
``settings_problems`` every settings problem of ``check``, ``serve`` and ``socket`` at once;
``tools`` lists, checks and runs tools; ``demo`` plays an incident in the terminal.
Commands use the layers below them; no product module imports this package but
``bot/__main__.py``.
"""

# Where every environment variable is described: one table in the source repository,
# checked against ``bot.settings`` by a test, as ``serve --help`` and a settings problem
# name it.
CONFIG_REFERENCE = "docs/configuration.md"
