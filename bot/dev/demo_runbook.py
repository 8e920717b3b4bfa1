"""The team's runbooks in the demo: the folder ``opsloop dev`` ships, and how the demo
model (``bot.dev.demo_model``) finds, reads and cites a runbook.

The folder: :data:`RUNBOOKS_DIR` (``bot/dev/runbooks``) holds a runbook for the demo
service "web" (its front matter names the demo's alerts) and two unrelated ones.
``opsloop dev`` points ``OPSLOOP_RUNBOOKS`` at it unless you set your own, and says it is
published at :data:`RUNBOOKS_URL`; the demo's alerts carry :func:`runbook_url` of their
runbook, so the bot puts that file in an alert job's first request.

What the model reads (:meth:`RunbookUse.read`, from the current turn's events):

- the runbook an alert job's request carries, after the alert: a paragraph starting
  ``The team's runbook <ref> (<title>). This is the team's runbook …`` and the runbook's
  text quoted line by line with ``> `` (``bot.turns.knowledge``, which this room may not
  import);
- ``search_runbooks``' answer: one block per hit, best first, each opening with its ref
  (``web.md#triage``) and ``title › heading`` (``tools.packs.runbooks.hits_text``);
- ``read_runbook``'s answer: ``Runbook: <title> (<ref>)``, then the text.

A runbook's numbered steps are matched to the tools the model called by the tool names a
step spells in backticks (`` `web_health` ``), walking forward through the runbook as the
calls went: health, metrics, restart, health again is Triage 1 and 2, then "Restart web"
1 and 3 (verify after). The answer cites each section it followed by ``path#slug`` and the
steps by number and name (:meth:`RunbookUse.citation`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bot.dev.demo_turn import RESTART, Event

RUNBOOKS_DIR = Path(__file__).with_name("runbooks")
RUNBOOKS_URL = "https://runbooks.example.com/"  # where the demo says its runbooks are published
WEB_RUNBOOK = "web.md"
SEARCH, READ = "search_runbooks", "read_runbook"
SEARCH_LIMIT = 3
QUERY_CHARS = 200


def runbooks_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What ``opsloop dev`` adds to the bot's environment for runbooks: the demo's folder
    and the address it is published at, unless ``environ`` names a folder of its own."""
    if environ.get("OPSLOOP_RUNBOOKS"):
        return {}
    return {"OPSLOOP_RUNBOOKS": str(RUNBOOKS_DIR), "OPSLOOP_RUNBOOKS_URL": RUNBOOKS_URL}


def runbook_url(path: str) -> str:
    """The published address of a runbook of the demo's folder (``web.md`` → its URL)."""
    return RUNBOOKS_URL + path.lstrip("/")


# -- a runbook's text --------------------------------------------------------------------

_HEADING = re.compile(r"^#{1,6}\s+(?P<text>.+?)\s*#*\s*$")
_STEP = re.compile(r"^(?P<number>\d+)[.)]\s+(?P<text>\S.*)$")
_TOOL = re.compile(r"`([a-z][a-z0-9_]*)`")
_LEAD = re.compile(r"^\*\*(?P<lead>[^*]+?)[.:]?\*\*")


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it ("Restart web" → ``restart-web``)."""
    text = re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower())
    return text.replace(" ", "-")


@dataclass(frozen=True, slots=True)
class Step:
    """A numbered step of a section, with the tools it names in backticks."""

    number: int
    text: str
    tools: frozenset[str]

    @property
    def name(self) -> str:
        """The step in a few words: its bold lead ("check health"), else its start."""
        found = _LEAD.match(self.text)
        words = found["lead"] if found else " ".join(self.text.split()[:6])
        return words[:1].lower() + words[1:]


@dataclass(frozen=True, slots=True)
class Section:
    heading: str
    slug: str
    steps: tuple[Step, ...]


@dataclass(frozen=True, slots=True)
class Runbook:
    """A runbook (or one section of it) as the model was given it: its ref, title and
    sections with their numbered steps."""

    ref: str
    title: str
    sections: tuple[Section, ...]

    @property
    def path(self) -> str:
        return self.ref.split("#", 1)[0]

    @classmethod
    def parse(cls, ref: str, title: str, markdown: str) -> Runbook:
        sections: list[Section] = []
        heading, steps = "", list[Step]()
        step: tuple[int, list[str]] | None = None

        def close_step() -> None:
            nonlocal step
            if step is not None:
                text = " ".join(" ".join(step[1]).split())
                steps.append(Step(step[0], text, frozenset(_TOOL.findall(text))))
                step = None

        for line in markdown.splitlines():
            if found := _HEADING.match(line):
                close_step()
                if heading or steps:
                    sections.append(Section(heading, slug(heading), tuple(steps)))
                heading, steps = found["text"], []
            elif found := _STEP.match(line):
                close_step()
                step = (int(found["number"]), [found["text"]])
            elif step is not None and line.startswith((" ", "\t")) and line.strip():
                step[1].append(line)
            else:
                close_step()
        close_step()
        if heading or steps:
            sections.append(Section(heading, slug(heading), tuple(steps)))
        return cls(ref, title, tuple(sections))

    def followed(self, calls: Sequence[str]) -> list[tuple[Section, list[Step]]]:
        """The steps ``calls`` (tool names, in order) carried out, by section in the
        runbook's order: each call matches the next step naming its tool (from the last
        matched step on, then from the top)."""
        steps = [(section, step) for section in self.sections for step in section.steps]
        done: set[int] = set()
        at = 0
        for call in calls:
            order = [*range(at, len(steps)), *range(at)]
            k = next((k for k in order if call in steps[k][1].tools), None)
            if k is not None:
                done.add(k)
                at = k
        out: list[tuple[Section, list[Step]]] = []
        for k in sorted(done):
            section, step = steps[k]
            if out and out[-1][0] is section:
                out[-1][1].append(step)
            else:
                out.append((section, [step]))
        return out

    def anchor(self, section: Section) -> str:
        return f"{self.path}#{section.slug}" if section.slug else self.path


def _numbers(steps: Sequence[Step]) -> str:
    """ "step 4", "steps 1–3", "steps 1 and 3", "steps 1, 3 and 4"."""
    n = [s.number for s in steps]
    if len(n) == 1:
        return f"step {n[0]}"
    if n == list(range(n[0], n[0] + len(n))) and len(n) > 2:
        return f"steps {n[0]}–{n[-1]}"
    return f"steps {', '.join(map(str, n[:-1]))} and {n[-1]}"


# -- what the conversation carries -------------------------------------------------------

_GIVEN = re.compile(
    r"^The team's runbook (?P<ref>\S+) \((?P<title>.*)\)\. This is the team's runbook", re.M
)
_PAGE = re.compile(
    r"^The page the alert's runbook_url points at, (?P<ref>\S+?)(?: \(cut\))?\. "
    r"This is the team's runbook",
    re.M,
)
_READ = re.compile(r"\ARunbook: (?P<title>.*) \((?P<ref>[^()\s]+)\)\s*$", re.M)
_HIT = re.compile(r"^(?P<ref>\S+\.(?:md|markdown)(?:#\S*)?)\n[ \t]+(?P<where>.+)$", re.M)
_MENTION = re.compile(r"<[@#!][^>]*>")


def given_runbook(text: str) -> Runbook | None:
    """The runbook a request carries after its alert, or None."""
    found = _GIVEN.search(text) or _PAGE.search(text)
    if found is None:
        return None
    quoted: list[str] = []
    for line in text[found.end() :].splitlines()[1:]:
        if not line.startswith(">"):
            break
        quoted.append(line[2:] if line.startswith("> ") else line[1:])
    title = found.groupdict().get("title") or ""
    return Runbook.parse(found["ref"], title, "\n".join(quoted))


def read_result(text: str) -> Runbook | None:
    """``read_runbook``'s answer as a runbook, or None (an ``Error:``)."""
    found = _READ.search(text)
    if found is None:
        return None
    return Runbook.parse(found["ref"], found["title"], text[found.end() :])


@dataclass(frozen=True, slots=True)
class Hit:
    """``search_runbooks``' top hit: its ref and ``title › heading``."""

    ref: str
    where: str

    @property
    def path(self) -> str:
        return self.ref.split("#", 1)[0]


def top_hit(text: str) -> Hit | None:
    """The first hit of ``search_runbooks``' answer, or None (no match, an error)."""
    if text.startswith(("Error:", "No runbook")):
        return None
    found = _HIT.search(text)
    return Hit(found["ref"], found["where"].strip()) if found else None


def search_query(words: str, *, alert: str | None = None) -> str:
    """What to search the runbooks for: how to triage the alert, or the person's words
    (about web, said so when they do not name it)."""
    if alert:
        return f"{alert} triage"
    text = " ".join(_MENTION.sub(" ", words).split())[:QUERY_CHARS]
    if not text:
        return "web failing or slow requests"
    return text if "web" in text.lower() else f"web {text}"


@dataclass(slots=True)
class RunbookUse:
    """What the current turn (everything since the last answer) knows of the team's
    runbooks, and which tools it called."""

    given: Runbook | None = None  # came with the request
    read_back: Runbook | None = None  # read_runbook's answer
    searched: bool = False
    hit: Hit | None = None  # search_runbooks' top hit
    calls: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, events: Sequence[Event]) -> RunbookUse:
        start = max((i + 1 for i, e in enumerate(events) if e.kind == "answer"), default=0)
        use = cls()
        for event in events[start:]:
            if event.kind == "user" and use.given is None and not use.calls:
                use.given = given_runbook(event.text)
            elif event.kind == "call":
                use.calls.append(event.tool)
            elif event.kind == "result" and event.tool == SEARCH:
                use.searched = True
                use.hit = top_hit(event.text)
            elif event.kind == "result" and event.tool == READ:
                use.read_back = read_result(event.text) or use.read_back
        return use

    @property
    def runbook(self) -> Runbook | None:
        return self.given or self.read_back

    def proposal_note(self) -> str | None:
        """The runbook step a restart proposal carries out, in a sentence, or None."""
        runbook = self.runbook
        if runbook is None:
            return None
        for section, steps in runbook.followed([*self.calls, RESTART]):
            for step in steps:
                if RESTART in step.tools:
                    return (
                        f"This is step {step.number} of the team's runbook "
                        f"`{runbook.anchor(section)}` ({step.name})."
                    )
        return None

    def citation(self) -> str | None:
        """The answer's paragraph naming the runbook followed and its steps, or None
        when the turn had no runbook and searched for none."""
        runbook = self.runbook
        if runbook is not None:
            followed = runbook.followed(self.calls)
            title = f" ({runbook.title})" if runbook.title else ""
            if not followed:
                return (
                    f"The team's runbook `{runbook.ref}`{title} was at hand; none of its "
                    "steps is one I took here."
                )
            parts = [
                f"`{runbook.anchor(section)}`: {_numbers(steps)} — "
                + ", ".join(s.name for s in steps)
                for section, steps in followed
            ]
            first, rest = parts[0].split(": ", 1)
            line = f"Following the team's runbook {first}{title}: {rest}"
            if len(parts) > 1:
                line += "; then " + "; then ".join(parts[1:])
            line += "."
            cited = {runbook.anchor(section) for section, _ in followed}
            if self.hit is not None and "#" in self.hit.ref and self.hit.ref not in cited:
                line += f" (search_runbooks' top hit was `{self.hit.ref}`.)"
            return line
        if self.hit is not None:
            return f"The team's runbook for this: `{self.hit.ref}` ({self.hit.where})."
        if self.searched:
            return "No team runbook matched this (search_runbooks found none)."
        return None


__all__ = [
    "READ",
    "RUNBOOKS_DIR",
    "RUNBOOKS_URL",
    "SEARCH",
    "WEB_RUNBOOK",
    "Hit",
    "Runbook",
    "RunbookUse",
    "Section",
    "Step",
    "given_runbook",
    "read_result",
    "runbook_url",
    "runbooks_env",
    "search_query",
    "slug",
    "top_hit",
]
