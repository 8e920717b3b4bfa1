"""What the chaos soak (``bot.emulator.soak``) found: its counts and problems, and the
last lines of every bot's log, as one self-contained failure message (``Report.text()``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from bot.emulator.bot_process import BotProcess

LOG_TAIL_LINES = 40  # of each bot's stdout and stderr, in the report's text


@dataclass
class Report:
    jobs: int = 0
    answered_once: int = 0
    answered_twice: int = 0
    ended_failed: int = 0
    unanswered: int = 0
    writes_once: int = 0
    writes_twice: int = 0
    writes_wrong_approver: int = 0
    replies_once: int = 0
    replies_lost_or_doubled: int = 0
    non_terminal: int = 0
    endings_owed: int = 0  # ended, its answer and ending never shown
    orphans: int = 0
    kills: int = 0
    failovers: int = 0
    model_5xx: int = 0
    slack_429_bursts: int = 0
    redeliveries: int = 0
    reclicks: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)  # the jobs' endings, counted
    not_completed: list[str] = field(default_factory=list)  # "job N (kind) status"
    broke: str = field(default="", repr=False)  # the traceback of what stopped the soak
    logs: dict[str, str] = field(default_factory=dict, repr=False)  # bot → its output's tail

    def lines(self) -> list[str]:
        skip = {"problems", "statuses", "not_completed", "broke", "logs"}
        rows = [f"{k:>24} {v}" for k, v in vars(self).items() if k not in skip]
        endings = ", ".join(f"{s} {n}" for s, n in sorted(self.statuses.items()))
        rows.append(f"{'endings':>24} {endings or '-'}")
        rows += [f"{'not completed':>24} {job}" for job in self.not_completed]
        return rows + [f"{'problem':>24} {p}" for p in self.problems]

    def text(self) -> str:
        """The counts, the problems, what stopped the soak and every bot's last log
        lines: a failure message that needs nothing else."""
        parts = ["chaos soak report:", *self.lines()]
        if self.broke:
            parts += ["----- the soak stopped -----", self.broke.rstrip()]
        for name, tail in self.logs.items():
            parts += [f"----- {name} -----", tail.rstrip()]
        return "\n".join(parts)

    @property
    def ok(self) -> bool:
        return not self.problems


def tail(bot: BotProcess, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a bot's stdout and of its stderr, labelled."""
    parts = [f"pid {bot.pid}, exit code {bot.returncode}"]
    for label, path in (("stdout", bot.stdout_path), ("stderr", bot.stderr_path)):
        text = path.read_text(errors="replace") if path.exists() else ""
        kept = text.splitlines()[-lines:]
        parts.append(f"{label} ({path}), last {len(kept)} lines:")
        parts += kept
    return "\n".join(parts)
