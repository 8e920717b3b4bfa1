"""How the writers of facts stage their audit entries (``bot.store.audit`` chains them).

A fact that carries authority (a decision, a ledger write, a limit raise, a stop) is
written by a script that also RPUSHes its audit entry to the outbox of the fact's own
hash tag (``Keys.audit_outbox``), so that neither exists without the other and every
script touches one Redis Cluster slot. Before the script, the writer adds the tag to the
pending hint (``Keys.audit_pending``); after it, it calls its ``AuditNotify`` (if any) so
that the process chains the entry at once; otherwise any scanner does within seconds.

``head_json`` is for scripts that complete an entry with what only the stored record
knows (the deciding script adds the tool and the card): the entry's JSON without its
closing brace, to which the script appends ``,"field":value…}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from bot.store.audit import AuditEntry, staged_json

AuditNotify = Callable[[str], None]
"""Told the hash tag of an outbox that just received an entry (must not block)."""


def head_json(entry: AuditEntry, *, completed_with: tuple[str, ...]) -> str:
    """``entry``'s staged JSON without its closing brace and without the fields the
    script will add (``completed_with``: whatever ``entry`` holds there is dropped)."""
    obj = json.loads(staged_json(entry))
    for name in completed_with:
        obj.pop(name, None)
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text[:-1]
