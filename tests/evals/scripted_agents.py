"""Two scripted agents for ``opsloop eval``'s proof that its graders discriminate.

Each case has a script (``tests/evals/agents/<case>.yml``): ``match``, a substring of the
case's first request that picks the script; ``diligent`` and ``reckless``, one step per
model response (``calls``: tool calls; ``answer``: the final text); ``reckless_fails``,
the check kinds that must catch the reckless agent. ``ScriptedAgent(name)`` is a policy
for the scripted model server (``bot.emulator.model_server``): step N answers the
request whose conversation already holds N assistant messages, so a card that was
denied or expired (a tool result saying so) simply leads to the next step.

``${re:PATTERN}`` in arguments and answers is the first group (else the whole match) of
PATTERN's first match in the tool results so far, newest first; ``?`` when none matches.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bot.emulator.scripted import Reply, ScriptedCall, ScriptedRequest

AGENTS = Path(__file__).with_name("agents")
NO_SCRIPT = "(no scripted agent matches this case)"


@dataclass(frozen=True)
class Script:
    case: str
    match: str
    steps: Mapping[str, list[dict[str, Any]]]
    reckless_fails: tuple[str, ...]


def load_scripts(folder: Path = AGENTS) -> list[Script]:
    scripts = []
    for path in sorted(folder.glob("*.yml")):
        raw = yaml.safe_load(path.read_text())
        scripts.append(
            Script(
                case=path.stem,
                match=str(raw["match"]),
                steps={"diligent": raw["diligent"], "reckless": raw["reckless"]},
                reckless_fails=tuple(raw.get("reckless_fails") or ()),
            )
        )
    return scripts


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def fill(template: str, results: list[str]) -> str:
    """``template`` with each ``${re:PATTERN}`` replaced (see the module docstring)."""
    out: list[str] = []
    at = 0
    while (start := template.find("${re:", at)) >= 0:
        out.append(template[at:start])
        depth, end = 1, start + 5
        while end < len(template) and depth:
            depth += {"{": 1, "}": -1}.get(template[end], 0)
            end += 1
        pattern = template[start + 5 : end - 1]
        out.append(_search(pattern, results))
        at = end
    out.append(template[at:])
    return "".join(out)


def _search(pattern: str, results: list[str]) -> str:
    for text in reversed(results):
        found = re.search(pattern, text, re.MULTILINE)
        if found:
            return found.group(1) if found.groups() else found.group(0)
    return "?"


def fill_value(value: Any, results: list[str]) -> Any:
    if isinstance(value, str):
        return fill(value, results)
    if isinstance(value, list):
        return [fill_value(v, results) for v in value]
    if isinstance(value, dict):
        return {k: fill_value(v, results) for k, v in value.items()}
    return value


class ScriptedAgent:
    """The policy of one agent (``diligent`` or ``reckless``) over every case's script."""

    def __init__(self, agent: str, scripts: list[Script] | None = None) -> None:
        self.agent = agent
        self.scripts = scripts if scripts is not None else load_scripts()

    def script_for(self, first: str) -> Script | None:
        found = [s for s in self.scripts if s.match in first]
        return found[0] if len(found) == 1 else None

    def __call__(self, request: ScriptedRequest) -> Reply:
        messages = request.messages
        users = [text_of(m.get("content")) for m in messages if m.get("role") == "user"]
        script = self.script_for("\n".join(users[:1])) or self.script_for("\n".join(users))
        if script is None:
            return Reply(content=NO_SCRIPT)
        steps = script.steps[self.agent]
        index = sum(1 for m in messages if m.get("role") == "assistant")
        results = [text_of(m.get("content")) for m in messages if m.get("role") == "tool"]
        step = steps[index] if index < len(steps) else steps[-1]
        if "calls" in step and index < len(steps):
            return Reply(
                tool_calls=[
                    ScriptedCall(c["tool"], fill_value(c.get("args") or {}, results))
                    for c in step["calls"]
                ]
            )
        answer = step.get("answer") if "answer" in step else None
        if answer is None:  # the script ran out on a step of calls: end with the last answer
            answers = [s["answer"] for s in steps if "answer" in s]
            answer = answers[-1] if answers else "(the script has no answer)"
        return Reply(content=fill(str(answer), results))
