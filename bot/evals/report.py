"""The report of a run: JSON (every check with its evidence), the table, the totals per
category, and two reports side by side (``--compare``).

The JSON report (``REPORT_VERSION``) is one document::

    {"version": 1, "model": "...", "judge_model": null, "started_at": "...",
     "seconds": 95.2, "totals": {...}, "categories": {"diagnosis": {...}, ...},
     "cases": [{"case", "title", "category", "repeat", "outcome", "seconds", "met",
                "checks": [{"kind", "label", "passed", "detail", "evidence"}],
                "answer", "stop_reason", "iterations", "tokens", "cost_usd",
                "calls": [...], "cards": [...], "facts": {...}, "error", "judge"}]}
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bot.evals.runner import CaseResult

REPORT_VERSION = 1


def case_json(result: CaseResult) -> dict[str, Any]:
    seen = result.observed
    return {
        "case": result.case,
        "title": result.title,
        "category": result.category,
        "repeat": result.repeat,
        "outcome": result.outcome,
        "seconds": round(result.seconds, 2),
        "met": result.met,
        "checks": [asdict(c) for c in result.checks],
        "answer": seen.answer if seen else None,
        "stop_reason": seen.stop_reason if seen else None,
        "iterations": seen.iterations if seen else None,
        "tokens": seen.tokens if seen else None,
        "cost_usd": seen.cost_usd if seen else None,
        "calls": [asdict(c) for c in seen.calls] if seen else [],
        "cards": [asdict(c) for c in seen.cards] if seen else [],
        "facts": result.facts,
        "error": result.error,
        "judge": result.judge,
    }


def totals(results: Sequence[CaseResult]) -> dict[str, Any]:
    def count(rows: Sequence[CaseResult]) -> dict[str, Any]:
        passed = sum(1 for r in rows if r.outcome == "pass")
        return {
            "cases": len(rows),
            "pass": passed,
            "fail": sum(1 for r in rows if r.outcome == "fail"),
            "error": sum(1 for r in rows if r.outcome == "error"),
            "pass_rate": round(passed / len(rows), 3) if rows else 0.0,
            "tokens": sum(r.observed.tokens for r in rows if r.observed),
            "cost_usd": _cost(rows),
            "seconds": round(sum(r.seconds for r in rows), 2),
        }

    categories: dict[str, list[CaseResult]] = {}
    for r in results:
        categories.setdefault(r.category, []).append(r)
    return {"all": count(results), "categories": {k: count(v) for k, v in categories.items()}}


def _cost(rows: Sequence[CaseResult]) -> float | None:
    costs = [r.observed.cost_usd for r in rows if r.observed and r.observed.cost_usd is not None]
    return round(sum(costs), 6) if costs else None


def report_json(
    results: Sequence[CaseResult],
    *,
    model: str,
    judge_model: str | None,
    seconds: float,
    backends: Mapping[str, float],
) -> dict[str, Any]:
    summary = totals(results)
    return {
        "version": REPORT_VERSION,
        "model": model,
        "judge_model": judge_model,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": round(seconds, 2),
        "backend_start_seconds": {k: round(v, 2) for k, v in backends.items()},
        "totals": summary["all"],
        "categories": summary["categories"],
        "cases": [case_json(r) for r in results],
    }


def load_report(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("version") != REPORT_VERSION:
        raise ValueError(f"{path}: not an opsloop eval report (version {REPORT_VERSION})")
    return data


OUTCOME_STYLE = {"pass": "green", "fail": "red", "error": "yellow"}


def _cell(outcome: str) -> str:
    return f"[{OUTCOME_STYLE.get(outcome, 'white')}]{outcome}[/]"


def print_table(report: Mapping[str, Any], console: Console) -> None:
    table = Table(title=f"opsloop eval · {escape(str(report['model']))}", title_justify="left")
    for column, justify in (
        ("case", "left"),
        ("category", "left"),
        ("result", "left"),
        ("checks", "right"),
        ("iter", "right"),
        ("tokens", "right"),
        ("cost $", "right"),
        ("s", "right"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    judged = any(c.get("judge") for c in report["cases"])
    if judged:
        table.add_column("judge", justify="right")
    for case in report["cases"]:
        name = case["case"] + (f" #{case['repeat']}" if case["repeat"] > 1 else "")
        cost = case["cost_usd"]
        row = [
            name,
            case["category"],
            _cell(case["outcome"]),
            f"{case['met']}/{len(case['checks'])}" if case["checks"] else "-",
            str(case["iterations"] if case["iterations"] is not None else "-"),
            f"{case['tokens']:,}" if case["tokens"] is not None else "-",
            f"{cost:.4f}" if cost is not None else "-",
            f"{case['seconds']:.1f}",
        ]
        if judged:
            judge = case.get("judge") or {}
            row.append(str(judge.get("score", "-")))
        table.add_row(*row)
    console.print(table)
    for case in report["cases"]:
        if case["outcome"] == "error":
            console.print(
                f"[yellow]{case['case']}[/]: {escape(str(case['error']))}", soft_wrap=True
            )
        failed = [c for c in case["checks"] if not c["passed"]]
        for check in failed:
            console.print(
                f"[red]{case['case']}[/] {check['kind']}: {escape(check['detail'])}", soft_wrap=True
            )
    cats = Table(title="per category", title_justify="left")
    for column in ("category", "cases", "pass", "fail", "error", "pass rate", "tokens", "cost $"):
        cats.add_column(column)
    rows = {**report["categories"], "all": report["totals"]}
    for name, t in rows.items():
        cats.add_row(
            name,
            str(t["cases"]),
            str(t["pass"]),
            str(t["fail"]),
            str(t["error"]),
            f"{t['pass_rate']:.0%}",
            f"{t['tokens']:,}",
            f"{t['cost_usd']:.4f}" if t["cost_usd"] is not None else "-",
        )
    console.print(cats)
    console.print(f"{report['seconds']:.1f} s in all")


def compare(old: Mapping[str, Any], new: Mapping[str, Any], console: Console) -> dict[str, Any]:
    """Two reports side by side: per case the outcome and checks met in each, what got
    better or worse; the totals. Returns the comparison as data."""

    def by_case(report: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
        rows: dict[str, Mapping[str, Any]] = {}
        for c in report["cases"]:
            rows.setdefault(c["case"], c)  # the first repeat stands for the case
        return rows

    before, after = by_case(old), by_case(new)
    table = Table(
        title=f"{escape(str(old['model']))}  →  {escape(str(new['model']))}", title_justify="left"
    )
    for column in ("case", "before", "after", "checks", "tokens", "change"):
        table.add_column(column)
    rank = {"pass": 2, "fail": 1, "error": 0}
    changes: dict[str, list[str]] = {"better": [], "worse": [], "same": [], "only_one": []}
    for name in sorted(set(before) | set(after)):
        b, a = before.get(name), after.get(name)
        if b is None or a is None:
            changes["only_one"].append(name)
            table.add_row(
                name, _cell(b["outcome"]) if b else "-", _cell(a["outcome"]) if a else "-"
            )
            continue
        delta = rank[a["outcome"]] - rank[b["outcome"]]
        if delta == 0:
            delta = a["met"] - b["met"]
        verdict = "better" if delta > 0 else "worse" if delta < 0 else "same"
        changes[verdict].append(name)
        style = {"better": "green", "worse": "red", "same": "white"}[verdict]
        table.add_row(
            name,
            _cell(b["outcome"]),
            _cell(a["outcome"]),
            f"{b['met']}/{len(b['checks'])} → {a['met']}/{len(a['checks'])}",
            f"{b['tokens'] or 0:,} → {a['tokens'] or 0:,}",
            f"[{style}]{verdict}[/]",
        )
    console.print(table)
    ot, nt = old["totals"], new["totals"]
    console.print(
        f"pass rate {ot['pass_rate']:.0%} → {nt['pass_rate']:.0%}; "
        f"{len(changes['better'])} better, {len(changes['worse'])} worse, "
        f"{len(changes['same'])} the same"
    )
    return changes
