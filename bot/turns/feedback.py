"""A click on the 👍/👎 buttons of an answer, kept in the job's trace and its incident record.

The feedback enters the trace of the job whose answer it is, if that trace still exists
(an old answer's trace may have expired: nothing is created then), so ``opsloop trace``
shows who found the answer useful next to how it came about.
"""

from __future__ import annotations

import logging
import time
from typing import Literal

from bot.errors import StoreError
from bot.store.parts import Stores
from bot.store.trace import FeedbackEntry, append_if_traced

log = logging.getLogger(__name__)


async def record_feedback(
    stores: Stores,
    job_id: str,
    *,
    value: Literal["positive", "negative"],
    by: str,
    message_ts: str | None,
) -> bool:
    """Append the click to ``job_id``'s trace if the trace exists, and show it on the job's
    incident record (``bot.store.incidents``) if that exists; whether the trace was written."""
    entry = FeedbackEntry(at=time.time(), value=value, by=by, message_ts=message_ts)
    traced = await append_if_traced(stores.redis, stores.keys, job_id, entry)
    try:
        await stores.incidents.set_feedback(job_id, by, "+1" if value == "positive" else "-1")
    except StoreError:
        log.warning("job %s: feedback not shown on its incident record", job_id, exc_info=True)
    return traced
