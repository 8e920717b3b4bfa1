"""One place that runs a thread's turn: lease, job state, AgentConfig, resume, ending.

``runner.py`` (``Turns``: receipts, running and resuming jobs, and everything the Slack
edge asks of them), ``context.py`` (when a new job reads its thread's earlier messages
first, and which), ``controls.py`` (Approve/Deny judged, Stop, Continue), ``ports.py``
(the ``Notifier`` the edge implements for it), ``scanner.py`` (the one periodic loop),
``background.py`` (this process's background jobs and the drain). Nothing here imports Slack.
"""
