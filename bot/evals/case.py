"""The case format: ``cases/NAME/case.yml`` and the files beside it (docs/evals.md).

A case names the backends it needs and the faults to inject, the opening (a mention, or an
Alertmanager webhook payload), the card script (who clicks what on each approval card, in
order) and its checks. ``load_cases`` reads a folder of cases; a broken case is a
``CaseError`` naming the file and what is wrong, never a half-read case.

Strings in the opening, the checks' argument predicates and ``answer_mentions`` may name
facts a fault reported with ``{{name}}`` (a pid, a pod's generated name): they are filled
in once the fault is injected (``Case.with_facts``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from bot.errors import ConfigError

CASE_FILE = "case.yml"
PACKAGED = Path(__file__).with_name("cases")
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
FACT = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
CATEGORIES = ("diagnosis", "safety")


class CaseError(ConfigError):
    """A case that cannot be read: its file and what is wrong."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Fault(_Strict):
    """A fault a backend injects before the opening and heals after the case."""

    backend: str
    name: str
    params: dict[str, Any] = Field(default_factory=dict, alias="with")


class Opening(_Strict):
    """What starts the investigation: a person's mention, or an alert (an Alertmanager
    webhook payload, inline or the name of a JSON/YAML file beside ``case.yml``)."""

    mention: str | None = None
    alert: dict[str, Any] | str | None = None
    user: str = "U0EVALREQ"

    @model_validator(mode="after")
    def _one(self) -> Opening:
        if (self.mention is None) == (self.alert is None):
            raise ValueError("give exactly one of 'mention' and 'alert'")
        return self


class Edit(_Strict):
    """Approve with edits: ``by`` submits the card's form with ``values`` (argument name →
    the text typed, as the form sends it; the others keep the card's values)."""

    by: str
    values: dict[str, str]


class Click(_Strict):
    """One click on a card: Approve or Deny, as a Slack user id; or an ``edit`` (the form
    of Approve with edits, submitted)."""

    approve: str | None = None
    deny: str | None = None
    edit: Edit | None = None

    @model_validator(mode="after")
    def _one(self) -> Click:
        if sum(x is not None for x in (self.approve, self.deny, self.edit)) != 1:
            raise ValueError("a click is 'approve: USER', 'deny: USER' or 'edit: {by, values}'")
        return self

    @property
    def outcome(self) -> Literal["approved", "denied", "edited"]:
        if self.edit is not None:
            return "edited"
        return "approved" if self.approve is not None else "denied"

    @property
    def user(self) -> str:
        return self.approve or self.deny or (self.edit.by if self.edit is not None else "")


class CardScript(_Strict):
    """What happens on one card, in the order cards are posted. ``approve``/``deny`` is
    one click; ``clicks`` several (a refused click, then another person's); ``nobody``
    (or no script left): nobody decides and the card expires."""

    approve: str | None = None
    deny: str | None = None
    clicks: list[Click] = Field(default_factory=list)
    nobody: bool = False

    @model_validator(mode="after")
    def _one(self) -> CardScript:
        given = [self.approve is not None, self.deny is not None, bool(self.clicks), self.nobody]
        if sum(given) != 1:
            raise ValueError("a card is one of 'approve: USER', 'deny: USER', 'clicks', 'nobody'")
        return self

    def all_clicks(self) -> list[Click]:
        if self.approve is not None:
            return [Click(approve=self.approve)]
        if self.deny is not None:
            return [Click(deny=self.deny)]
        return list(self.clicks)


class CallCheck(_Strict):
    """A tool call and predicates on its arguments. A predicate is a value (equal, as
    text), or one of ``{equals: V}``, ``{in: [V, …]}``, ``{matches: REGEX}`` (searched,
    case-insensitive), ``{contains: TEXT}`` (case-insensitive), ``{absent: true}``."""

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)

    @field_validator("args")
    @classmethod
    def _predicates(cls, args: dict[str, Any]) -> dict[str, Any]:
        for name, predicate in args.items():
            if isinstance(predicate, dict):
                unknown = set(predicate) - {"equals", "in", "matches", "contains", "absent"}
                if unknown or len(predicate) != 1:
                    raise ValueError(
                        f"argument {name!r}: a predicate is one of equals, in, matches, "
                        "contains, absent"
                    )
                if "matches" in predicate:
                    try:
                        re.compile(str(predicate["matches"]))
                    except re.error as exc:
                        raise ValueError(f"argument {name!r}: bad regex: {exc}") from None
        return args

    def describe(self) -> str:
        if not self.args:
            return self.tool
        parts = ", ".join(f"{k}={_show(v)}" for k, v in self.args.items())
        return f"{self.tool}({parts})"


def _show(predicate: Any) -> str:
    if isinstance(predicate, dict):
        ((op, value),) = predicate.items()
        return f"<{op} {value!r}>"
    return repr(predicate)


class Checks(_Strict):
    """What a good investigation shows (docs/evals.md, "Checks")."""

    # Each group: at least one of its alternatives appears in the answer (case-insensitive).
    answer_mentions: list[list[str]] = Field(default_factory=list)
    # Text that must not appear in the answer (a secret a tool showed, a forged approval).
    answer_never: list[str] = Field(default_factory=list)
    # Calls that must have run (read-only evidence, or an approved change).
    called: list[CallCheck] = Field(default_factory=list)
    # Changes that must have been asked for (a card posted), whatever was decided.
    proposed: list[CallCheck] = Field(default_factory=list)
    # Calls that must never run nor be proposed.
    never: list[CallCheck] = Field(default_factory=list)
    # Evidence before any change: a read-only call succeeded before the first change was
    # asked for, and no change ran without a person's approval.
    asked_before_change: bool = False
    max_iterations: int | None = Field(default=None, ge=1)

    @field_validator("answer_mentions")
    @classmethod
    def _groups(cls, groups: list[list[str]]) -> list[list[str]]:
        if any(not group for group in groups):
            raise ValueError("an answer_mentions group needs at least one alternative")
        if any(not str(alt).strip() for group in groups for alt in group):
            raise ValueError("an answer_mentions alternative is empty (it would match any answer)")
        return groups


class CaseLimits(_Strict):
    """The job's limits (as ``OPSLOOP_MAX_ITERATIONS`` and friends would set them)."""

    max_iterations: int = Field(default=15, ge=1, le=100)
    deadline_s: float = Field(default=180.0, gt=0, le=3600)
    token_budget: int = Field(default=200_000, ge=1000)


class Case(_Strict):
    """One incident case."""

    name: str = ""  # the folder's name (set by ``load_case``)
    folder: Path = Path()
    title: str
    category: str = "diagnosis"
    description: str = ""
    backends: list[str] = Field(default_factory=list)
    faults: list[Fault] = Field(default_factory=list)
    channel: str = "C0EVAL"
    # OPSLOOP_APPROVERS for this case (empty: any person but the bot).
    approvers: list[str] = Field(default_factory=list)
    tools: str | None = None  # a tools.yml beside case.yml (allowlists, command tools)
    runbooks: str | None = None  # a folder of runbooks beside case.yml (OPSLOOP_RUNBOOKS)
    opening: Opening
    cards: list[CardScript] = Field(default_factory=list)
    limits: CaseLimits = Field(default_factory=CaseLimits)
    checks: Checks
    rubric: str = ""  # for --judge-model: what a good answer explains

    @field_validator("category")
    @classmethod
    def _category(cls, category: str) -> str:
        if not NAME.match(category):
            raise ValueError("a category is a short lower-case word")
        return category

    @model_validator(mode="after")
    def _faults_start_backends(self) -> Case:
        for fault in self.faults:
            if fault.backend not in self.backends:
                raise ValueError(f"fault {fault.name!r} needs backend {fault.backend!r} listed")
        return self

    def card(self, index: int) -> CardScript:
        """The script of the ``index``-th card posted (nobody decides past the script)."""
        return self.cards[index] if index < len(self.cards) else CardScript(nobody=True)

    def alert_payload(self) -> dict[str, Any] | None:
        """The opening's Alertmanager payload (read from its file when named)."""
        alert = self.opening.alert
        if alert is None or isinstance(alert, dict):
            return alert
        path = self.folder / alert
        text = path.read_text()
        loaded = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        if not isinstance(loaded, dict):
            raise CaseError(f"{path}: an alert payload is a mapping")
        return loaded

    def with_facts(self, facts: Mapping[str, str]) -> Case:
        """This case with ``{{name}}`` filled in from the faults' facts (opening, alert
        payload, checks); a name no fault reported stays as written."""
        if not facts:
            return self
        opening = self.opening.model_copy(
            update={
                "mention": fill(self.opening.mention, facts),
                "alert": fill(self.alert_payload(), facts),
            }
        )
        checks = Checks.model_validate(fill(self.checks.model_dump(), facts))
        return self.model_copy(update={"opening": opening, "checks": checks})


def fill(value: Any, facts: Mapping[str, str]) -> Any:
    """``value`` with every ``{{name}}`` in its strings replaced by ``facts[name]``."""
    if isinstance(value, str):
        return FACT.sub(lambda m: facts.get(m.group(1), m.group(0)), value)
    if isinstance(value, list):
        return [fill(v, facts) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, facts) for k, v in value.items()}
    return value


def load_case(folder: Path) -> Case:
    """The case in ``folder`` (``case.yml``); ``CaseError`` naming the file and the field."""
    path = folder / CASE_FILE
    if not NAME.match(folder.name):
        raise CaseError(f"{folder}: a case's folder name is lower-case letters, digits, - and _")
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise CaseError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise CaseError(f"{path}:{where} not YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(raw, dict):
        raise CaseError(f"{path}: a case is a mapping")
    try:
        case = Case.model_validate({**raw, "name": folder.name, "folder": folder})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'case'}: {e['msg']}" for e in exc.errors()
        )
        raise CaseError(f"{path}: {problems}") from None
    for named, kind in ((case.tools, "tools"), (case.runbooks, "runbooks")):
        if named is not None and not (folder / named).exists():
            raise CaseError(f"{path}: {kind}: no {named!r} beside case.yml")
    if case.opening.alert is not None:
        try:
            case.alert_payload()
        except (OSError, ValueError, yaml.YAMLError) as exc:
            raise CaseError(f"{path}: opening.alert: {exc}") from None
    return case


def load_cases(*folders: Path) -> list[Case]:
    """Every case under each folder (one sub-folder per case, sorted by name); a name
    given twice is an error (a team's case may not shadow a shipped one silently)."""
    cases: dict[str, Case] = {}
    for root in folders:
        if not root.is_dir():
            raise CaseError(f"{root}: no such folder of cases")
        for folder in sorted(p for p in root.iterdir() if (p / CASE_FILE).is_file()):
            case = load_case(folder)
            if case.name in cases:
                raise CaseError(
                    f"{folder}: a case named {case.name!r} is in {cases[case.name].folder}"
                )
            cases[case.name] = case
    return list(cases.values())


def select(cases: Sequence[Case], names: Sequence[str], category: str | None = None) -> list[Case]:
    """The cases named (in the order given), or those of ``category``, or all."""
    if names:
        known = {c.name: c for c in cases}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise CaseError(f"no case named {', '.join(unknown)} (try: opsloop eval --list)")
        chosen = [known[n] for n in names]
    else:
        chosen = list(cases)
    if category is not None:
        chosen = [c for c in chosen if c.category == category]
        if not chosen:
            raise CaseError(f"no case in category {category!r}")
    return chosen
