"""The jobs side of one process, in parts: what the Slack edge and the scanner hold.

``Turns`` is assembled once, by the composition root (``bot.service.build_turns``), from
parts that each do one thing, and holds no logic of its own; the edge calls the part
that acts:

- ``stores`` (``bot.store.parts.Stores``): the records, read directly (a job, an
  approval, the workspace's live counts, the health check);
- ``receiver`` (``bot.turns.receive``): the ack path's receipt of a message;
- ``runner`` (``bot.turns.run``): runs and resumes jobs under the thread's lease;
- ``cards`` (``bot.turns.cards``): posts a paused job's approval card, finds it again;
- ``controls`` (``bot.turns.controls``): Approve, Deny, Stop and Continue;
- ``edits`` (``bot.turns.edits``, made from the controls and the catalogue): Approve
  with edits;
- ``audit`` (``bot.turns.audit``): chains the audit entries the stores stage.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.store.parts import Stores
from bot.turns.audit import AuditPublisher
from bot.turns.cards import Cards
from bot.turns.controls import Controls
from bot.turns.edits import Edits
from bot.turns.receive import Receiver
from bot.turns.run import JobRunner, TurnSettings
from tools.registry import Catalog


@dataclass(frozen=True, slots=True, kw_only=True)
class Turns:
    """Everything a process needs to receive, run and control jobs; one per process."""

    stores: Stores
    receiver: Receiver
    runner: JobRunner
    cards: Cards
    controls: Controls
    # Chains the audit entries the stores stage; None: the scanner's drain chains them
    # (tests, tools).
    audit: AuditPublisher | None = None

    @property
    def catalog(self) -> Catalog:
        """The tools jobs of this process may use."""
        return self.runner.catalog

    @property
    def edits(self) -> Edits:
        """Approve with edits: the form of a pending call and its submission."""
        return Edits(self.controls, self.catalog)

    @property
    def settings(self) -> TurnSettings:
        return self.runner.settings
