"""The local development mode (``opsloop dev``): the dev workspace on the emulated Slack
(``workspace``; ``response_urls``, ``pane``) and its web page (``page``, ``page_feed``,
``static/``), the dev people, the demo service "web" (``demo_service``, the process itself
in ``demo_web``), its tools and the scripted demo model (``demo_model``, reading the
conversation with ``demo_turn``). The imitations themselves (fake Slack, model server,
redis-server, the signed sender) live in ``bot.emulator``; nothing in the product imports
this package but the ``dev`` command."""
