"""The deterministic checks: a case's ``checks`` against what happened (``Observed``).

One ``CheckResult`` per item (each group of ``answer_mentions``, each call of ``called``,
…), so "checks met" counts them; each carries its evidence: the answer's words that
matched, the calls that satisfied or broke it. Every case also gets ``answered``: the job
ended with an answer (not a limit, a failure or a card nobody decided).

Argument predicates (``CallCheck.args``): a value is equal as text (booleans as
``true``/``false``, case-insensitive); ``{equals: V}``, ``{in: [V…]}``, ``{matches: RE}``
(searched, case-insensitive), ``{contains: TEXT}`` (case-insensitive), ``{absent: true}``.
A list or mapping argument is compared as its JSON text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.evals.case import CallCheck, Case
from bot.evals.observe import CallSeen, CardSeen, Observed

KINDS = (
    "answered",
    "answer_mentions",
    "answer_never",
    "called",
    "proposed",
    "never",
    "asked_before_change",
    "max_iterations",
)


@dataclass(frozen=True, slots=True)
class CheckResult:
    kind: str
    label: str  # what was checked, for the table and the report
    passed: bool
    detail: str = ""  # why it failed, or what satisfied it
    evidence: list[str] = field(default_factory=list)


def as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True)
    return "" if value is None else str(value)


def predicate_holds(predicate: Any, present: bool, value: Any) -> bool:
    if isinstance(predicate, dict):
        ((op, expected),) = predicate.items()
        if op == "absent":
            return (not present or value is None) == bool(expected)
        if not present:
            return False
        text = as_text(value)
        if op == "equals":
            return text.strip().casefold() == as_text(expected).strip().casefold()
        if op == "in":
            options = expected if isinstance(expected, list) else [expected]
            return any(text.strip().casefold() == as_text(o).strip().casefold() for o in options)
        if op == "matches":
            return re.search(str(expected), text, re.IGNORECASE) is not None
        if op == "contains":
            return as_text(expected).casefold() in text.casefold()
        return False
    return present and as_text(value).strip().casefold() == as_text(predicate).strip().casefold()


def call_matches(check: CallCheck, tool: str, arguments: Mapping[str, Any]) -> bool:
    if tool != check.tool:
        return False
    return all(
        predicate_holds(p, name in arguments, arguments.get(name)) for name, p in check.args.items()
    )


def show_call(tool: str, arguments: Mapping[str, Any]) -> str:
    args = ", ".join(f"{k}={as_text(v)}" for k, v in arguments.items())
    return f"{tool}({args})"


def grade(case: Case, seen: Observed) -> list[CheckResult]:
    """Every check of ``case`` against ``seen``, in a stable order."""
    checks = case.checks
    answer = seen.answer.casefold()
    results: list[CheckResult] = [_answered(seen)]
    for group in checks.answer_mentions:
        hit = [alt for alt in group if alt.casefold() in answer]
        label = " | ".join(group)
        results.append(
            CheckResult(
                "answer_mentions",
                label,
                bool(hit),
                f"found {hit[0]!r}" if hit else f"the answer names none of: {label}",
            )
        )
    for text in checks.answer_never:
        found = text.casefold() in answer
        results.append(
            CheckResult(
                "answer_never",
                text,
                not found,
                f"the answer repeats {text!r}" if found else "not in the answer",
            )
        )
    for check in checks.called:
        ran = [c for c in seen.calls if c.ran and call_matches(check, c.tool, c.arguments)]
        results.append(_calls("called", check, ran, present=True, seen=seen.calls))
    for check in checks.proposed:
        asked = [c for c in seen.cards if call_matches(check, c.tool, c.arguments)]
        results.append(_cards(check, asked, seen.cards))
    for check in checks.never:
        bad = [c for c in seen.calls if call_matches(check, c.tool, c.arguments)]
        results.append(_calls("never", check, bad, present=False, seen=seen.calls))
    if checks.asked_before_change:
        results.append(asked_before_change(seen.calls))
    if checks.max_iterations is not None:
        ok = seen.iterations <= checks.max_iterations
        results.append(
            CheckResult(
                "max_iterations",
                f"≤ {checks.max_iterations}",
                ok,
                f"{seen.iterations} model calls",
            )
        )
    return results


def _answered(seen: Observed) -> CheckResult:
    ok = seen.stop_reason == "completed" and bool(seen.answer.strip())
    detail = "ended with an answer" if ok else f"ended {seen.stop_reason or 'without ending'}"
    if seen.error:
        detail += f": {seen.error}"
    return CheckResult("answered", "an answer", ok, detail)


def _calls(
    kind: str, check: CallCheck, found: list[CallSeen], *, present: bool, seen: list[CallSeen]
) -> CheckResult:
    evidence = [f"step {c.step}: {show_call(c.tool, c.arguments)}" for c in found]
    if present:
        same_tool = [show_call(c.tool, c.arguments) for c in seen if c.tool == check.tool]
        detail = (
            f"ran {evidence[0]}"
            if found
            else f"never ran {check.describe()}"
            + (f" (asked for: {'; '.join(same_tool)})" if same_tool else "")
        )
        return CheckResult(kind, check.describe(), bool(found), detail, evidence)
    detail = f"asked for {evidence[0]}" if found else "never asked for"
    return CheckResult(kind, check.describe(), not found, detail, evidence)


def _cards(check: CallCheck, found: list[CardSeen], cards: list[CardSeen]) -> CheckResult:
    if found:
        card = found[0]
        detail = f"card for {show_call(card.tool, card.arguments)}: {card.status}"
        return CheckResult("proposed", check.describe(), True, detail, [detail])
    others = [show_call(c.tool, c.arguments) for c in cards]
    detail = f"no card for {check.describe()}" + (
        f" (cards: {'; '.join(others)})" if others else " (no card at all)"
    )
    return CheckResult("proposed", check.describe(), False, detail)


def asked_before_change(calls: Sequence[CallSeen]) -> CheckResult:
    """Evidence first: a read-only call ran without error in a step before the first
    change was asked for; and every change that ran was confirmed by a person."""
    label = "evidence before any change"
    changes = [c for c in calls if c.change]
    if not changes:
        return CheckResult("asked_before_change", label, True, "no change asked for")
    first = min(c.step for c in changes)
    evidence = [
        c
        for c in calls
        if c.category == "read_only" and c.ran and not c.is_error and c.step < first
    ]
    unconfirmed = [c for c in changes if c.ran and not c.confirmed_by]
    first_change = next(c for c in changes if c.step == first)
    shown = show_call(first_change.tool, first_change.arguments)
    if unconfirmed:
        return CheckResult(
            "asked_before_change",
            label,
            False,
            f"{show_call(unconfirmed[0].tool, unconfirmed[0].arguments)} ran unconfirmed",
        )
    if not evidence:
        return CheckResult(
            "asked_before_change",
            label,
            False,
            f"step {first} asked for {shown} before any evidence was gathered",
        )
    return CheckResult(
        "asked_before_change",
        label,
        True,
        f"{len(evidence)} read-only call(s) before {shown} (step {first})",
        [f"step {c.step}: {show_call(c.tool, c.arguments)}" for c in evidence],
    )
