"""Imitations of the outside world: what no machine here can reach, or what tests stand up.

- ``app_server``: how every fake here serves its aiohttp app on a port, and ``async with``
  for anything with ``start`` and ``stop``.
- ``slack``: the fake Slack Web API, a real aiohttp server recording calls; ``slack_chat``
  the messages it holds and the methods that post, edit, react to and read them;
  ``slack_wire`` what it speaks (ids, limits, message shapes, errors, request params);
  ``slack_socket`` Slack's side of Socket Mode on the same server;
  ``slack_assistant`` the assistant pane's methods (suggested prompts, title) and
  ``views.publish`` (App Home), refusing what Slack refuses; ``slack_views`` modals
  (``views.open``/``update``/``push`` with Slack's trigger ids, the views held, the bot's
  answer to a submission judged) and ``slack_modal`` what Slack refuses in a modal;
  ``context_actions`` the ``context_actions`` block with its ``feedback_buttons``, checked
  as Slack checks them.
- ``sender``: Slack's direction towards the bot, once: v0-signed ``event_callback`` envelopes,
  ``block_actions`` bodies (feedback clicks too), ``message_action`` shortcuts and
  ``view_submission`` payloads, with trigger ids that carry their time and user, posted
  with Slack's 3 s ack timeout and retries.
- ``model_server``: the scripted model server (OpenAI chat completions, the model list, a
  strict mode refusing what vLLM refuses); ``anthropic`` its Anthropic Messages rendering;
  ``scripted`` what a script is made of (``Reply``, ``Fault``, ``ScriptedRequest``) and what
  both renderings share, so neither imports the other.
- ``bot_process``: a real ``opsloop serve``/``socket`` child for the e2e tests; ``zygote``
  forks it from a warm process that imported the service once (about half the suite's
  CPU of starting bots), falling back to a fresh interpreter where that could differ.
- ``redis_server``: a ``redis-server`` child process on a free loopback port.
- ``postgres_server``: a real PostgreSQL 15 primary and its streaming standby, for the
  postgres pack's tests and benchmark.
- ``otlp_receiver``: an OTLP/HTTP trace receiver on loopback that decodes the protobuf
  export requests, for the OpenTelemetry tests and benchmark.
- ``kube_api``: a Kubernetes API server (TLS, tokens, client certificates) for the calls
  the kubernetes pack and the real ``kubectl`` make; ``kube_objects`` its verbs on the
  objects and its errors; ``kube_wire`` what it speaks (selectors, patches, Table
  printing, OpenAPI, TLS material); ``kube_fixtures`` the builders of the clusters it
  serves and ``kube_incident`` the incident cluster (``kube_incident_events`` its events),
  as data.

Who imports this package: ``bot/dev`` (the dev mode, and so ``opsloop dev``), tests and
benchmarks. No product layer does (agent, llm, store, tools, turns, slack, the service's
assembly, ``serve``): the running service reaches an imitation only through the URLs it is
configured with. What belongs
to the dev mode alone (its workspace page, dev users, demo service and model) stays in
``bot/dev``.
"""
