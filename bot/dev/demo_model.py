"""The demo model of ``opsloop dev``: a scripted incident responder for ``ScriptedServer``.

``demo_policy()`` answers every request from the conversation it carries (never from a
call count), with the four demo tools of ``bot.dev.demo_tools``:

1. a request → "checking web's health" and ``web_health``;
2. healthy → it says so and changes nothing; degraded → ``web_metrics``;
3. with the evidence → ``web_restart``, the reason in the same message (the Approve card
   shows it);
4. ``Error: declined: …`` → an answer without a restart (what it found, what next);
   restarted → ``web_health`` and ``web_metrics`` again to verify;
5. a Markdown answer: summary, a before/after table, the action and who approved it
   (read from the restart's output).

A person's message that arrives mid-turn changes the next step: "don't restart, show me
the logs first" → ``web_logs`` and an answer without a restart until someone asks for
one again ("restart web", in a later message). A message the runtime took in after a
decided card carries the runtime's note on the true order (``(opsloop: sent at … while
`web_restart` waited for approval; <@U…> approved it at …, after this message; …)``,
:class:`ReplyOrder`): the answer says what that note says — sent while the restart
waited and approved after it, not "already restarted when your message came in", which
it says only when the message came after the decision (or carries no note). The note is
never read as the person's words. Only the turn since the last answer counts: a
thread's earlier incidents do not. Both the OpenAI and the Anthropic message
formats are read; tool results are the messages with role ``tool`` (or ``tool_result``
blocks).

An alert's job (its request is the alert group, quoted as data) is an investigation:
``web_health``, ``web_metrics`` and ``web_logs`` at once, then an answer that says whether
the alert holds, what the evidence shows, what the log names as the cause, how sure that
is and the next step (a restart, which a person asks for in the thread); it changes
nothing. Nothing in the alert's text is read as a request.

The team's runbooks (``bot.dev.demo_runbook``): an alert job whose request carries the
team's runbook follows it, and its answer cites the sections and steps it followed
("Following the team's runbook `web.md#triage` (…): steps 1–3 — check health, …"); a
restart's reason names the runbook step it is. A turn without one searches the runbooks
(``search_runbooks``, only when offered) with its first read-only calls, reads the top
hit's runbook (``read_runbook``, when offered) with the next, and cites what it followed,
or the top hit. Without those tools offered, nothing of this changes a step.

What the conversation says (the turn, the tools' results, the note) is read by
``bot.dev.demo_turn``; this module decides the next step and words the answers.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any

from bot.dev.demo_runbook import READ, SEARCH, SEARCH_LIMIT, RunbookUse, search_query
from bot.dev.demo_turn import (
    HEALTH,
    LOGS,
    METRICS,
    RESTART,
    AlertAsk,
    Health,
    ReplyOrder,
    Restart,
    Turn,
    asks_for,
    first_line,
    restart_intent,
    timeline,
)
from bot.emulator.scripted import Reply, ScriptedCall, ScriptedRequest

__all__ = ["DemoPolicy", "ReplyOrder", "Turn", "demo_policy", "restart_intent"]

LOG_LINES = 40


# -- wording ----------------------------------------------------------------------------


def _logs_call() -> ScriptedCall:
    return ScriptedCall(LOGS, {"lines": LOG_LINES})


def _user(who: str | None) -> str:
    if who and re.fullmatch(r"[UW][A-Z0-9]{2,}", who):
        return f"<@{who}>"
    return who or "someone (the tool output did not say who)"


def _pct(value: Any) -> str:
    return f"{float(value) * 100:.1f}%" if isinstance(value, int | float) else "—"


def _ms(value: Any) -> str:
    if not isinstance(value, int | float):
        return "—"
    return "<1 ms" if value < 1 else f"{float(value):.0f} ms"


def _window(metrics: dict[str, Any]) -> str:
    """The span the metrics describe: "the last 42 s" (the service says), else a minute."""
    seconds = metrics.get("window_s")
    if isinstance(seconds, int | float):
        return f"the last {max(1.0, float(seconds)):.0f} s"
    return "the last minute"


def _failed(metrics: dict[str, Any]) -> str:
    """ "30.0% of 120 requests failed in the last 42 s", or that none finished."""
    n = metrics.get("requests_last_min")
    if n == 0 or metrics.get("error_rate") is None:
        return f"no request finished in {_window(metrics)}"
    count = "?" if n is None else n
    return f"{_pct(metrics.get('error_rate'))} of {count} requests failed in {_window(metrics)}"


def _share(metrics: dict[str, Any]) -> str:
    """A table cell: "30.0% of 120 (last 42 s)"."""
    n = metrics.get("requests_last_min")
    if not metrics:
        return "—"
    if n == 0 or metrics.get("error_rate") is None:
        return f"none finished ({_window(metrics).removeprefix('the ')})"
    return f"{_pct(metrics.get('error_rate'))} of {n} ({_window(metrics).removeprefix('the ')})"


def _failing(metrics: dict[str, Any]) -> bool:
    rate = metrics.get("error_rate")
    return isinstance(rate, int | float) and rate > 0


def _evidence(health: Health | None, metrics: dict[str, Any] | None) -> list[str]:
    lines = []
    if health is not None:
        lines.append(f"/health: {health.describe()} (healthy is HTTP 200 well under a second)")
    if metrics:
        lines.append(
            f"{_failed(metrics)}, p50 "
            f"{_ms(metrics.get('p50_ms'))}, p95 {_ms(metrics.get('p95_ms'))}, CPU "
            f"{metrics.get('cpu_percent', '?')}% (burn {metrics.get('cpu_burn', '?')}), "
            f"pid {metrics.get('pid', '?')}, up {metrics.get('uptime_s', '?')} s"
        )
    return lines


def _log_notes(text: str | None) -> list[str]:
    """The log's warnings that are not slow requests: what the service says about itself."""
    return [
        line.split(" WARNING ", 1)[1]
        for line in (text or "").splitlines()
        if " WARNING " in line and not line.endswith("(slow)")
    ]


def _log_findings(text: str | None) -> list[str]:
    if not text or text.startswith("Error:"):
        return []
    lines = text.splitlines()
    errors = sum(1 for line in lines if " ERROR " in line)
    slow = sum(1 for line in lines if line.endswith("(slow)"))
    notes = _log_notes(text)
    out = [f"log: {errors} failed and {slow} slow requests in the last {len(lines)} lines"]
    if notes:
        out.append(f'log says: "{notes[-1]}"')
    return out


def _log_cause(text: str | None) -> str:
    """What the log names as the cause, in a sentence."""
    if notes := _log_notes(text):
        return (
            f'the log says so: "{notes[-1]}". That holds the workers: requests wait, '
            "and many time out."
        )
    if text and "waiting for a worker" in text:
        return (
            "requests time out waiting for a worker (the log's errors): something holds "
            "every worker; the log's last lines do not say what started it."
        )
    return "the log does not say; the symptoms are slow, failing requests and a busy CPU."


class DemoPolicy:
    """``(ScriptedRequest) -> Reply``; see the module docstring."""

    def __call__(self, request: ScriptedRequest) -> Reply:
        return self.answer(request.messages, request.tools)

    def answer(self, messages: list[dict[str, Any]], tools: Sequence[dict[str, Any]] = ()) -> Reply:
        """The next step for OpenAI-shaped ``messages``, with ``tools`` offered (all
        when none are given)."""
        offered = {t.get("function", t).get("name") for t in tools}
        events = timeline(messages)
        turn = Turn.read(events)
        reply = self.follow(turn) if turn.pending is not None else None
        reply = reply or self.next_step(turn)
        missing = [c.name for c in reply.tool_calls if offered and c.name not in offered]
        if missing:
            reply = Reply(content=self.unavailable(turn, missing))
        return self.with_runbook(reply, turn, RunbookUse.read(events), offered)

    @staticmethod
    def with_runbook(reply: Reply, turn: Turn, use: RunbookUse, offered: set[Any]) -> Reply:
        """``reply`` with the team's runbook in it: searched for (``search_runbooks``,
        when offered) with the first read-only calls of a turn that came without one,
        read (``read_runbook``) with the next; named in a restart's reason and cited in
        the answer."""
        if not reply.tool_calls:
            cited = use.citation()
            if cited is None:
                return reply
            return dataclasses.replace(reply, content=f"{reply.content or ''}\n\n{cited}")
        calls = list(reply.tool_calls)
        read_only = all(c.name != RESTART for c in calls)
        if read_only and use.runbook is None and not use.calls and SEARCH in offered:
            words = search_query(turn.request, alert=turn.alert.name if turn.alert else None)
            calls.append(ScriptedCall(SEARCH, {"query": words, "limit": SEARCH_LIMIT}))
        elif read_only and use.runbook is None and use.hit is not None and READ in offered:
            if READ not in use.calls:
                calls.append(ScriptedCall(READ, {"ref": use.hit.path}))
        content = reply.content
        note = use.proposal_note() if not read_only else None
        if note is not None:
            content = f"{content} {note}" if content else note
        return dataclasses.replace(reply, content=content, tool_calls=calls)

    def follow(self, turn: Turn) -> Reply | None:
        """A person spoke since the last step: do what they asked, if it is clear."""
        assert turn.pending is not None
        asked, intent = asks_for(turn.pending), restart_intent(turn.pending)
        r = turn.restart[1] if turn.restart is not None else None
        done = r is not None and r.outcome == "done"
        health, metrics = turn.before_restart()
        order = turn.order
        if r is not None and done and (asked or intent == "hold"):
            lead = self.restarted_lead(r, order)
        elif r is not None and r.outcome == "declined" and order is not None:
            lead = self.declined_lead(order)
        elif intent == "hold":
            lead = "Understood: I won't restart web."
        else:
            lead = "Sure."
        if asked:
            calls = [_logs_call() if n == LOGS else ScriptedCall(n, {}) for n in asked]
            if order is not None:
                shown = " and ".join(
                    {LOGS: "the logs", METRICS: "the metrics", HEALTH: "the health"}[n]
                    for n in asked
                )
                return Reply(content=f"{lead} Here are {shown} you asked for.", tool_calls=calls)
            shown = " and ".join(
                {LOGS: "its log", METRICS: "its metrics", HEALTH: "its health"}[n] for n in asked
            )
            return Reply(content=f"{lead} Here is {shown}.", tool_calls=calls)
        if done or health is None or health.ok:
            return None  # verifying, or nothing to restart: the usual next step
        if intent == "go":
            return self.propose(health, metrics, asked_by_user=True)
        if intent == "hold":
            return Reply(content=self.hold_answer(turn))
        return None

    @staticmethod
    def restarted_lead(r: Restart, order: ReplyOrder | None) -> str:
        """The restart ran; the person's message asked otherwise: when it came, truly."""
        moved = f"pid {r.old_pid} → {r.new_pid}"
        if order is not None and order.outcome == "approved" and order.when == "waiting":
            return (
                "Your message came in while the restart waited for approval; "
                f"{order.decider} approved it at {order.decided_at}, after your message, "
                f"so web was restarted ({moved})."
            )
        if order is not None and order.outcome == "approved" and order.when == "before_ask":
            return (
                "Your message came in before I asked to restart web, but I read it only "
                f"after {order.decider} approved the restart at {order.decided_at}, so web "
                f"was restarted ({moved})."
            )
        by = _user(r.approver) if order is None or order.by is None else order.by
        at = f" at {order.decided_at}" if order is not None else ""
        return (
            f"web had already been restarted ({moved}, approved by {by}{at}) when your "
            "message came in; that cannot be undone."
        )

    @staticmethod
    def declined_lead(order: ReplyOrder) -> str:
        """The restart did not run; the person's message came before or after that."""
        done = order.decision()
        if order.when == "after_decision":
            return f"Your message came in after {done}: web was not restarted."
        return (
            f"Your message came in while the restart waited for approval; {done}, "
            "so web was not restarted."
        )

    def next_step(self, turn: Turn) -> Reply:
        if turn.restart is not None:
            return self.after_restart(turn)
        if turn.alert is not None:
            return self.investigate_alert(turn, turn.alert)
        health, metrics = turn.before_restart()
        if health is None:
            extra = [n for n in asks_for(turn.request) if n != HEALTH]
            calls = [ScriptedCall(HEALTH, {})]
            calls += [_logs_call() if n == LOGS else ScriptedCall(n, {}) for n in extra]
            return Reply(content="Checking web's health endpoint first.", tool_calls=calls)
        if health.ok:
            return Reply(content=self.healthy_answer(health))
        if turn.intent == "hold":
            if not turn.logs:
                return Reply(
                    content=f"web is degraded ({health.describe()}). Not restarting, as asked: "
                    "reading its log instead.",
                    tool_calls=[_logs_call()],
                )
            return Reply(content=self.hold_answer(turn))
        if metrics is None and turn.intent != "go":
            return Reply(
                content=f"/health answered {health.describe()}: web is degraded. "
                "Looking at its metrics.",
                tool_calls=[ScriptedCall(METRICS, {})],
            )
        return self.propose(health, metrics, asked_by_user=turn.intent == "go")

    def propose(
        self, health: Health, metrics: dict[str, Any] | None, *, asked_by_user: bool
    ) -> Reply:
        why = [f"/health answered {health.describe()}"]
        if metrics:
            p95 = _ms(metrics.get("p95_ms"))
            if _failing(metrics):
                why.append(f"{_failed(metrics)} (p95 {p95})")
            else:
                why.append(f"the p95 latency of {_window(metrics)} is {p95}")
            if metrics.get("cpu_burn") == "on":
                why.append(f"it burns {metrics.get('cpu_percent', '?')}% CPU")
        lead = "As you asked, proposing a restart. " if asked_by_user else ""
        reason = (
            f"{lead}web is degraded: {', '.join(why[:-1]) + ' and ' if len(why) > 1 else ''}"
            f"{why[-1]}. A restart starts a fresh process, which should clear this; "
            "I'll check /health and the metrics again afterwards."
        )
        return Reply(content=reason, tool_calls=[ScriptedCall(RESTART, {})])

    def after_restart(self, turn: Turn) -> Reply:
        assert turn.restart is not None
        _, restart = turn.restart
        before_h, before_m = turn.before_restart()
        if restart.outcome == "declined":
            return Reply(content=self.declined_answer(turn, restart))
        if restart.outcome == "failed":
            lines = [
                "**The restart of web failed**, so nothing changed for the better:",
                f"`{first_line(restart.text)}`",
                "",
                "Before it:",
            ]
            lines += [f"- {e}" for e in _evidence(before_h, before_m)]
            lines += ["", "Next step: read `web_logs` and check the service before retrying."]
            return Reply(content="\n".join(lines))
        after_h, after_m = turn.after_restart()
        if after_h is None:
            return Reply(
                content=f"web was restarted (pid {restart.old_pid or '—'} → {restart.new_pid}). "
                "Checking /health and the metrics again.",
                tool_calls=[ScriptedCall(HEALTH, {}), ScriptedCall(METRICS, {})],
            )
        return Reply(content=self.restart_answer(turn, restart, after_h, after_m))

    def investigate_alert(self, turn: Turn, alert: AlertAsk) -> Reply:
        """An alert's job: all the read-only evidence at once, then what it shows."""
        health, metrics = turn.before_restart()
        if health is None:
            return Reply(
                content=f"Alert {alert.name}: checking web's health, metrics and log.",
                tool_calls=[ScriptedCall(HEALTH, {}), ScriptedCall(METRICS, {}), _logs_call()],
            )
        return Reply(content=self.alert_answer(turn, alert, health, metrics))

    # -- answers ------------------------------------------------------------------------

    def alert_answer(
        self, turn: Turn, alert: AlertAsk, health: Health, metrics: dict[str, Any] | None
    ) -> str:
        logs = turn.logs[-1][1] if turn.logs else None
        # The log's counts; what it says about itself is the cause, quoted once below.
        found = [f"- {e}" for e in _evidence(health, metrics) + _log_findings(logs)[:1]]
        later = [f"- meanwhile: {u}" for u in turn.alert_updates]
        if health.ok and not _failing(metrics or {}):
            return "\n".join(
                [
                    f"**{alert.name}: not confirmed — web looks healthy now.** What I see:",
                    *found,
                    *later,
                    "",
                    "The alert may have fired on a blip web has recovered from. Nothing "
                    "needs fixing, so I changed nothing; if it fires again, I'll look again.",
                ]
            )
        cause = _log_cause(logs)
        return "\n".join(
            [
                f"**{alert.name}: confirmed — web is degraded.** What I found:",
                *found,
                *later,
                "",
                f"**Likely cause:** {cause}",
                "",
                "**How sure:** "
                + (
                    "high: /health, the metrics and the log agree."
                    if metrics and logs
                    else "fair: not every source answered (see above)."
                ),
                "",
                "**Next step:** restart web; a fresh process should clear this. Say "
                '"restart web" in this thread and I\'ll ask for approval. I changed nothing.',
            ]
        )

    def healthy_answer(self, health: Health) -> str:
        return (
            f"**web looks healthy:** /health answered {health.describe()}. "
            "Nothing needs fixing, so I changed nothing.\n\n"
            "If users still see problems, tell me what they see and I'll dig into its "
            "metrics and logs."
        )

    def hold_answer(self, turn: Turn) -> str:
        health, metrics = turn.before_restart()
        logs = turn.logs[-1][1] if turn.logs else None
        lines = ["**Holding off on a restart, as you asked.** What I see:"]
        lines += [f"- {e}" for e in _evidence(health, metrics) + _log_findings(logs)]
        lines += [
            "",
            "Nothing was changed: web is still degraded. When you want it restarted, "
            'say "restart web" and I\'ll ask for approval.',
        ]
        return "\n".join(lines)

    def declined_answer(self, turn: Turn, restart: Restart) -> str:
        health, metrics = turn.before_restart()
        logs = turn.logs[-1][1] if turn.logs else None
        lines = [
            f"**I did not restart web**: the restart was declined ({restart.text}).",
            "",
            "What I found:",
        ]
        lines += [f"- {e}" for e in _evidence(health, metrics) + _log_findings(logs)]
        next_step = "" if logs else "read its log (`web_logs`) for what started this, and "
        if turn.order is not None:
            lines += ["", turn.order.line()]
        lines += [
            "",
            f"web is still degraded. Next step: {next_step}restart it if users are "
            'affected: say "restart web" and I\'ll ask for approval again.',
        ]
        return "\n".join(lines)

    def restart_answer(
        self, turn: Turn, restart: Restart, after_h: Health, after_m: dict[str, Any] | None
    ) -> str:
        before_h, before_m = turn.before_restart()
        b, a = before_m or {}, after_m or {}

        def cpu(m: dict[str, Any]) -> str:
            if "cpu_percent" not in m:
                return "—"
            return f"{float(m['cpu_percent']):.0f}% (burn {m.get('cpu_burn', '?')})"

        rows = [
            ("/health", before_h.describe() if before_h else "—", after_h.describe()),
            ("state", str(b.get("state", "—")), str(a.get("state", "—"))),
            ("failed requests", _share(b), _share(a)),
            ("p95 latency", _ms(b.get("p95_ms")), _ms(a.get("p95_ms"))),
            ("CPU", cpu(b), cpu(a)),
            ("pid", restart.old_pid or str(b.get("pid", "—")), restart.new_pid or "—"),
        ]
        if after_h.ok:
            was = [f"/health {before_h.describe()}"] if before_h else []
            if _failing(b):
                was.append(f"{_pct(b.get('error_rate'))} of requests failing")
            if b.get("cpu_burn") == "on":
                was.append("CPU burn on")
            head = (
                f"**web is healthy again.** It was degraded ({', '.join(was) or 'see below'}); "
                "a restart cleared it."
            )
            still = (
                "the cause. A restart clears the symptom, not what caused it: if web "
                "degrades again, read `web_logs` before restarting it again."
            )
        else:
            head = f"**web was restarted but is still not healthy:** {after_h.describe()}."
            still = "web itself. Next step: read `web_logs` for what keeps it degraded."
        table = ["| | before | after |", "|---|---|---|"]
        table += [f"| {name} | {before} | {after} |" for name, before, after in rows]
        extra: list[str] = []
        if turn.order is not None:
            extra += [turn.order.line(), ""]
        logs = _log_findings(turn.logs[-1][1] if turn.logs else None)
        if logs:
            extra += [f"**Logs you asked for:** {'; '.join(logs).removeprefix('log: ')}.", ""]
        return "\n".join(
            [
                head,
                "",
                *table,
                "",
                f"**Action:** restarted web (pid {restart.old_pid or '—'} → {restart.new_pid}), "
                f"approved by {_user(restart.approver)}.",
                "",
                *extra,
                f"**Still open:** {still}",
            ]
        )

    def unavailable(self, turn: Turn, missing: list[str]) -> str:
        health, metrics = turn.before_restart()
        lines = [
            f"I can't use {', '.join(f'`{m}`' for m in missing)} here (not offered to "
            "me in this channel), so I stopped."
        ]
        found = _evidence(health, metrics)
        if found:
            lines += ["", "What I found so far:", *[f"- {e}" for e in found]]
        return "\n".join(lines)


def demo_policy() -> Callable[[ScriptedRequest], Reply]:
    """The demo incident responder, for ``ScriptedServer(demo_policy())``."""
    return DemoPolicy()
