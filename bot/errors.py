"""Every error opsloop raises on purpose, in one tree.

    OpsloopError
    ├── ConfigError            bad or missing configuration; stops start-up with one line
    │   └── CaseError          bot/evals/case.py: an eval case that cannot be read
    ├── UserFacingError        safe to show to a Slack user as is
    ├── RunError               a job's run failed; carries the job id
    ├── StoreError             Redis (state, history, queues) failed
    │   ├── StoreUnavailable   bot/store/connection.py: Redis unreachable or too slow
    │   │   └── NotReplicated  bot/store/replicas.py: too few replicas confirmed a
    │   │       │              write in time (``OPSLOOP_REDIS_MIN_REPLICAS``)
    │   │       └── ClaimWithdrawn  bot/store/ledger.py: a ledger claim no replica
    │   │                          confirmed, withdrawn: the call did not start
    │   ├── NotClaimed         an approved call whose ledger claim could not be
    │   │                      acknowledged while its card was valid: it is not run
    │   ├── StoreConflict      bot/store/connection.py: a write refused (stale fencing
    │   │                      token, a job status transition not allowed)
    │   └── HandedOver         not a failure: the run stopped at a step boundary for another
    │                          process to take the job over; like a store failure it
    │                          abandons the run without ending the job
    ├── ChatError              the Slack Web API failed
    ├── ToolError              a tool failed; its message becomes the ``Error: …`` result
    │   ├── SupervisorFault    tools/packs/supervisor_rpc.py: a fault supervisord answered
    │   ├── PageRefused        tools/page_text.py: a runbook page the http policy does not
    │   │                      let opsloop read (nothing was sent)
    │   └── McpDown            tools/mcp/connection.py: an MCP server is unreachable, hung
    │       │                  or broke the protocol
    │       └── Misconfigured  tools/mcp/load.py: cannot start as configured; not retried
    ├── CondenseError          the history could not be condensed; the loop carries on
    │   └── NothingToCondense  no prefix is worth replacing
    ├── BackendError           bot/evals/backends/base.py: an eval backend that could not
    │                          start, or a fault it could not inject
    ├── ServiceError           bot/dev/demo_service.py: the demo service could not be started,
    │                          stopped or reached
    └── ModelError             the model API failed; the agent's recovery decides by subclass
        ├── ModelUnavailableError   transient (timeout, 429, 5xx, connection) after the
        │                           client's own retries: try the next model of the chain
        ├── ContextOverflowError    the request does not fit the model's context: condense
        └── ModelRequestError       anything else (400, quota, malformed): the run fails
            └── ModelAuthError      401/403: the key or its permissions are wrong

A class whose line names a module lives there, beside the one place that raises it (the
store's translation of Redis errors, a pack's or the MCP client, the dev mode's demo
service); every other class is defined below. ``tests/test_error_tree.py`` fails when a
subclass of ``OpsloopError`` in ``bot`` or ``tools`` is missing here or lives elsewhere.

Only the Slack edge turns errors into user-facing text. This module imports nothing
but the standard library so that every layer, the pure agent core included, can use it.
"""

from __future__ import annotations


class OpsloopError(Exception):
    """Base of every error opsloop raises on purpose."""


class ConfigError(OpsloopError):
    """Configuration is missing or malformed."""


class UserFacingError(OpsloopError):
    """An error whose message is safe to show to a Slack user."""


class RunError(OpsloopError):
    """A job's run failed."""

    def __init__(self, message: str, *, job_id: str) -> None:
        super().__init__(message)
        self.job_id = job_id


class StoreError(OpsloopError):
    """The durable store (Redis) failed."""


class NotClaimed(StoreError):
    """An approved call's ledger claim was never acknowledged (too few replicas) while
    its card was valid, or the wait for it was stopped: the call did not start and is
    not run; the core gives it a result that says why."""


class HandedOver(StoreError):
    """The run stopped at a step boundary, its last step saved, so that another process
    takes the job over (this one is shutting down). Like a store failure it abandons the
    run without ending the job, which is why it is one."""


class ChatError(OpsloopError):
    """The chat platform's API (Slack) failed."""


class ToolError(OpsloopError):
    """A tool failed; the message is what the model sees after ``Error: ``."""


class ModelError(OpsloopError):
    """The model API failed."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        model: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.model = model
        self.retry_after = retry_after  # seconds the provider asked us to wait, if it said


class ModelUnavailableError(ModelError):
    """Transient failure that outlived the client's retries; the next model may work."""


class ContextOverflowError(ModelError):
    """The request exceeds the model's context window."""


class ModelRequestError(ModelError):
    """A non-transient model API error (bad request, authentication, quota)."""


class ModelAuthError(ModelRequestError):
    """The model API refused the credentials (401/403); retrying cannot help."""


class CondenseError(OpsloopError):
    """The history could not be condensed; the loop carries on without it."""


class NothingToCondense(CondenseError):
    """No prefix is worth replacing (too short, no safe boundary, only a summary)."""
