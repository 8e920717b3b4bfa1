"""The backends cases run against (``base.py``: the protocol, the kinds, the error); one
module per kind beside it."""

from bot.evals.backends.base import KINDS, Backend, BackendError, Facts, Reach, backend_class

__all__ = ["KINDS", "Backend", "BackendError", "Facts", "Reach", "backend_class"]
