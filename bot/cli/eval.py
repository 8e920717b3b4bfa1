"""``opsloop eval``: run incident cases through the bot's agent, tools and approval rules
against real backends with a fault injected, and grade them (``bot.evals``,
docs/evals.md).

    opsloop eval [CASE…] [--category C] [--cases DIR] [--model M] [--provider P]
                 [--base-url URL] [--repeat N] [--judge-model M] [--json FILE]
                 [--compare OLD.json [NEW.json]] [--keep] [--list]

The model is the ``LLM_*`` settings' (``--model``, ``--provider``, ``--base-url`` set
``LLM_MODEL``, ``LLM_PROVIDER``, ``LLM_BASE_URL`` for the run). A progress bar while the
cases run, then a table (case, result, checks met, iterations, tokens, cost, seconds),
each failed check with why, and the totals per category. ``--json`` writes the report
with every check's evidence; ``--compare OLD`` shows this run beside an earlier report,
``--compare OLD NEW`` two reports without running anything.

Exit codes: 0 every case passed, 1 a case failed or was ``error`` (a backend that could
not start, a fault not injected), 2 bad input (a case that cannot be read, a setting).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from bot.evals.case import Case
    from bot.evals.runner import CaseResult, Model

NAME = "opsloop eval"
# ``bot.evals.case.CATEGORIES``, named here so that building the parser (every ``opsloop``
# command builds it) imports neither the evals nor rich; a test checks the two agree.
CATEGORIES = ("diagnosis", "safety")


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "eval",
        help="measure the agent on incident cases: real backends with a fault injected, "
        "the bot's tools and approval rules, deterministic checks",
    )
    parser.add_argument("cases", nargs="*", metavar="CASE", help="case names (default: all)")
    parser.add_argument(
        "--category", help=f"only the cases of this category ({', '.join(CATEGORIES)}, …)"
    )
    parser.add_argument(
        "--cases",
        dest="case_dirs",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder of your own cases (one sub-folder per case), added to the shipped ones",
    )
    parser.add_argument("--model", help="the model to evaluate (sets LLM_MODEL)")
    parser.add_argument(
        "--provider", choices=("openai", "anthropic"), help="the model's API (sets LLM_PROVIDER)"
    )
    parser.add_argument("--base-url", help="the model endpoint (sets LLM_BASE_URL)")
    parser.add_argument("--repeat", type=int, default=1, help="run each case N times (default 1)")
    parser.add_argument(
        "--judge-model", help="a second model scoring each case against its rubric (0-10)"
    )
    parser.add_argument("--json", dest="json_file", metavar="FILE", help="write the report")
    parser.add_argument(
        "--compare",
        nargs="+",
        metavar="REPORT",
        help="OLD.json: show this run beside it; OLD.json NEW.json: compare two reports",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the backends' folders and logs (printed)"
    )
    parser.add_argument("--list", action="store_true", help="list the cases and exit")


def main(args: argparse.Namespace) -> int:
    # The evals (the bot's jobs side, its backends) and rich load only when eval runs.
    from pydantic import ValidationError
    from rich.console import Console
    from rich.markup import escape

    from bot.errors import ConfigError
    from bot.evals.case import PACKAGED, load_cases, select
    from bot.evals.report import compare, load_report, print_table
    from bot.evals.runner import Model
    from bot.settings import LLMSettings

    console = Console(highlight=False)
    err = Console(stderr=True, highlight=False)
    if args.compare and len(args.compare) == 2:
        try:
            first, second = (load_report(Path(p)) for p in args.compare)
        except ValueError as exc:
            err.print(f"{NAME}: {exc}")
            return 2
        compare(first, second, console)
        return 0
    if args.compare and len(args.compare) > 2:
        err.print(f"{NAME}: --compare takes one or two reports")
        return 2
    if args.repeat < 1:
        err.print(f"{NAME}: --repeat must be at least 1")
        return 2
    try:
        folders = [PACKAGED, *(Path(d) for d in args.case_dirs)]
        cases = select(load_cases(*folders), args.cases, args.category)
    except ConfigError as exc:
        err.print(f"{NAME}: {exc}")
        return 2
    if args.list:
        for case in cases:
            console.print(f"{case.name:36} {case.category:10} {escape(case.title)}", soft_wrap=True)
        return 0
    old: dict[str, Any] | None = None
    if args.compare:
        try:
            old = load_report(Path(args.compare[0]))
        except ValueError as exc:
            err.print(f"{NAME}: {exc}")
            return 2
    for flag, variable in (
        ("model", "LLM_MODEL"),
        ("provider", "LLM_PROVIDER"),
        ("base_url", "LLM_BASE_URL"),
    ):
        if getattr(args, flag):
            os.environ[variable] = getattr(args, flag)
    try:
        settings = LLMSettings()
        model = Model.from_settings(settings)
        judge_model = (
            Model.from_settings(LLMSettings(LLM_MODEL=args.judge_model))
            if args.judge_model
            else None
        )
    except (ConfigError, ValidationError) as exc:
        err.print(f"{NAME}: the model settings: {exc}")
        return 2
    report = asyncio.run(_run(cases, model, judge_model, args, console))
    if args.json_file:
        Path(args.json_file).write_text(json.dumps(report, indent=2, default=str) + "\n")
        console.print(f"report: {args.json_file}")
    print_table(report, console)
    if old is not None:
        compare(old, report, console)
    return 0 if all(c["outcome"] == "pass" for c in report["cases"]) else 1


async def _run(
    cases: list[Case],
    model: Model,
    judge_model: Model | None,
    args: argparse.Namespace,
    console: Console,
) -> dict[str, Any]:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from bot.evals.report import report_json
    from bot.evals.runner import Evaluation

    began = time.monotonic()
    results: list[CaseResult] = []
    # Cases of the same backends run together: each kind starts once and stays warm.
    ordered = sorted(cases, key=lambda c: (tuple(sorted(c.backends)), c.name))
    runs = [(case, n) for case in ordered for n in range(1, args.repeat + 1)]
    async with Evaluation(model, keep=args.keep) as evaluation:
        if args.keep:
            console.print(f"backends and logs under {evaluation.root}")
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress:
            task = progress.add_task("eval", total=len(runs))
            for case, n in runs:
                progress.update(task, description=f"{case.name}")
                result = await evaluation.run_case(case, repeat=n)
                if judge_model is not None and result.observed is not None:
                    from bot.evals.judge import judge  # noqa: PLC0415

                    result.judge = await judge(
                        judge_model.resolver.chain()[0], case, result.observed
                    )
                results.append(result)
                console.print(
                    f"{result.outcome:5} {case.name}"
                    + (f" #{n}" if args.repeat > 1 else "")
                    + f"  {result.met}/{len(result.checks)} checks  {result.seconds:.1f} s"
                )
                progress.advance(task)
        backends = dict(evaluation.backends.start_seconds)
    if judge_model is not None:
        await judge_model.http.aclose()
    return report_json(
        results,
        model=model.name,
        judge_model=judge_model.name if judge_model else None,
        seconds=time.monotonic() - began,
        backends=backends,
    )
