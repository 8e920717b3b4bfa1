"""A click on the 👍/👎 buttons of an answer, kept in the job's trace.

The feedback enters the trace of the job whose answer it is, if that trace still exists
(an old answer's trace may have expired: nothing is created then), so ``opsloop trace``
shows who found the answer useful next to how it came about.
"""

from __future__ import annotations

import time
from typing import Literal

from bot.store.parts import Stores
from bot.store.trace import FeedbackEntry, append_if_traced


async def record_feedback(
    stores: Stores,
    job_id: str,
    *,
    value: Literal["positive", "negative"],
    by: str,
    message_ts: str | None,
) -> bool:
    """Append the click to ``job_id``'s trace if the trace exists; whether written."""
    entry = FeedbackEntry(at=time.time(), value=value, by=by, message_ts=message_ts)
    return await append_if_traced(stores.redis, stores.keys, job_id, entry)
