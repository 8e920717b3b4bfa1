"""The Slack edge: listeners for events and actions, rendering, and the two transports.

``app.py`` (the bolt app, the message listeners: the ack path), ``context.py`` (a
thread's messages rendered as the context a new job reads first), ``actions.py`` (the
buttons), ``notifier.py`` (how a job shows itself: ``bot.turns.ports.Notifier``),
``progress.py`` (a running job's face in the thread, with its parts ``live_status.py``,
``run_steps.py``, ``job_ending.py``, ``job_face.py``, ``thread_status.py``) / ``streaming.py`` /
``job_stream.py`` / ``answers.py`` / ``status_blocks.py`` / ``blockkit.py`` (rendering),
``updates.py`` and ``posting.py`` (paced edits, posts that wait out rate limits),
``policy.py`` (who may click), ``gate.py`` and
``inbound.py`` (what is let in), ``identity.py`` (auth.test), ``client.py`` (the
scrubbing Web API client), ``http.py`` (``opsloop serve``) and ``socket.py`` (``opsloop
socket``). It talks to jobs through ``bot.turns`` only: no store operations, no keys
(store record types are read for their fields). Not here: building the service
(``bot.service``), imitations of Slack (``bot.emulator``).
"""
