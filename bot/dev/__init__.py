"""The local development mode (``opsloop dev``): the dev workspace on the emulated Slack
and its web page, the dev people, the demo service "web", its tools and the scripted
demo model. The imitations themselves (fake Slack, model server, redis-server, the
signed sender) live in ``bot.emulator``; nothing in the product imports this package
but the ``dev`` command."""
