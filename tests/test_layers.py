"""The rooms of the tree and which may import which, as a test.

Every module of ``bot/`` and ``tools/`` is parsed with ``ast`` (nothing is imported or
run) and each of its imports — at the top or inside a function, relative or absolute,
``importlib.import_module("x")`` with a literal name — is checked against ``ALLOWED``: a
room may import itself and the rooms listed for it, nothing else. Dependencies point
down: agent ← records ← store; agent ← alerts (the webhook's values); agent ← llm,
store, tools, alerts ← turns ← slack ← the composition root and the CLI. The records
(``bot.records``: jobs, approvals, ledger entries, threads) are the values the store
keeps and the edge shows; the edge imports them, and no module of the store.
Nothing in the product imports the emulator (``bot.emulator``: the imitations of Slack,
the model providers and redis-server that the dev mode and the tests stand up), and no
two modules import each other, directly or round a longer cycle.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.agent.test_core_is_pure import imported_names

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bot", "tools")

# The shared leaves: errors (the standard library only), settings (the environment),
# the system prompt, credential scrubbing (on the core's pure redaction) and logging.
LEAVES: Mapping[str, frozenset[str]] = {
    "bot": frozenset(),  # bot/__init__.py: the version
    "bot.errors": frozenset(),
    "bot.settings": frozenset({"bot.errors"}),
    "bot.prompts": frozenset({"bot.errors"}),
    "bot.agent": frozenset({"bot.errors"}),
    "bot.scrub": frozenset({"bot.agent"}),
    "bot.logs": frozenset({"bot.scrub"}),
}
SHARED = frozenset(LEAVES) - {"bot"}
ALLOWED: Mapping[str, frozenset[str]] = {
    **LEAVES,
    "bot.llm": frozenset({"bot.agent", "bot.errors", "bot.settings", "bot.scrub"}),
    # The values the store keeps and the edge shows, with no I/O.
    "bot.records": frozenset({"bot.agent", "bot.errors"}),
    "bot.store": frozenset({"bot.agent", "bot.errors", "bot.records"}),
    # Alerts in: the webhook's payload, the routes, the text the model reads (no I/O).
    "bot.alerts": frozenset({"bot.agent", "bot.errors"}),
    # Team knowledge: runbooks (files in, sections out), the timeline's values (no Redis).
    "bot.knowledge": frozenset({"bot.agent", "bot.errors", "bot.scrub"}),
    "tools": frozenset({"bot.agent", "bot.errors", "bot.scrub", "bot.knowledge"}),
    # OpenTelemetry: the switch, a job's trace meta, the SDK's spans (only when on).
    "bot.otel": frozenset({"bot.agent", "bot.store"}),
    "bot.turns": frozenset(
        {"bot.agent", "bot.errors", "bot.store", "tools", "bot.llm", "bot.otel", "bot.alerts"}
        | {"bot.knowledge"}
    ),
    "bot.slack": frozenset(
        {"bot.turns", "bot.records", "bot.llm", "bot.metrics", "bot.otel", "bot.alerts"}
        | {"bot.knowledge"}
    )
    | SHARED,
    "bot.metrics": SHARED,
    "bot.service": frozenset(
        {"bot.llm", "bot.store", "tools", "bot.turns", "bot.slack", "bot.metrics", "bot.otel"}
        | {"bot.alerts", "bot.knowledge"}
    )
    | SHARED,
    # The chaos soak (bot.emulator.soak) reads each job's state by the store's keys and
    # judges its ending by the scanner's MAX_DELIVERIES; the tests' zygote
    # (bot.emulator.zygote) preloads what `opsloop serve` imports, from the CLI down.
    "bot.emulator": frozenset(
        {"bot.agent", "bot.errors", "bot.records", "bot.store", "bot.turns", "bot.cli"}
    ),
    "bot.dev": frozenset({"bot.llm", "bot.store", "tools", "bot.turns", "bot.slack", "bot.service"})
    | {"bot.emulator"}
    | SHARED,
    # ``opsloop eval``: the cases' backends (the emulator's real servers) with the bot's own
    # jobs side, tools and stores put together as the composition root does.
    "bot.evals": frozenset(
        {"bot.llm", "bot.store", "bot.records", "tools", "bot.turns", "bot.slack", "bot.service"}
    )
    | {"bot.emulator", "bot.alerts", "bot.knowledge", "bot.otel"}
    | SHARED,
    "bot.cli": frozenset(
        {"bot", "bot.llm", "bot.store", "tools", "bot.turns", "bot.slack", "bot.service"}
    )
    | {"bot.metrics", "bot.dev", "bot.otel", "bot.alerts", "bot.knowledge", "bot.evals"}
    | SHARED,
    "bot.__main__": frozenset({"bot.cli"}),
}
PRODUCT = frozenset(ALLOWED) - {"bot.emulator", "bot.dev", "bot.evals", "bot.cli", "bot.__main__"}


def room(module: str) -> str:
    """The room a module belongs to: ``tools`` whole, else ``bot.<first part>``."""
    parts = module.split(".")
    if parts[0] == "tools":
        return "tools"
    if len(parts) == 1 or parts[1] == "__version__":
        return "bot"
    return ".".join(parts[:2])


def modules() -> Iterator[tuple[str, Path, bool]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            yield ".".join(parts), path, is_package


def imports() -> dict[str, set[str]]:
    """Each product module → the ``bot``/``tools`` modules it imports."""
    found: dict[str, set[str]] = {}
    for name, path, is_package in modules():
        names = imported_names(path.read_text(), name, is_package)
        found[name] = {n for n in names if n.split(".")[0] in PACKAGES}
    return found


def violations(graph: Mapping[str, set[str]]) -> list[str]:
    bad = []
    for module, names in sorted(graph.items()):
        here = room(module)
        allowed = ALLOWED.get(here)
        if allowed is None:
            bad.append(f"{module}: its room {here!r} is not in the table")
            continue
        for name in sorted(names):
            there = room(name)
            if there != here and there not in allowed:
                bad.append(f"{module} imports {name} ({here} may not import {there})")
    return bad


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    known = set(graph)
    edges = {m: {n for n in names if n in known and n != m} for m, names in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def without_packages(graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """The graph without edges into a package's ``__init__`` from its own modules (a
    package importing its submodules, and they it, is how Python packages are built)."""
    return {
        m: {n for n in names if not (m.startswith(n + ".") and n in graph)}
        for m, names in graph.items()
    }


# -- the tree as it is -----------------------------------------------------------------


def test_every_import_follows_the_table() -> None:
    assert violations(imports()) == []


def test_nothing_in_the_product_imports_the_emulator() -> None:
    graph = imports()
    offenders = [
        f"{m} imports {n}"
        for m, names in graph.items()
        if room(m) in PRODUCT
        for n in names
        if room(n) == "bot.emulator"
    ]
    assert offenders == []


def test_no_import_cycles() -> None:
    assert cycles(without_packages(imports())) == []


# -- the test can fail -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("bot.store.jobs", "from bot.slack.cards import approval_card"),
        ("bot.store.jobs", "from bot.turns import run"),
        ("tools.registry", "import bot.store.keys"),
        ("bot.agent.run", "from ..llm import openai"),
        ("bot.settings", "from tools.packs import PackConfig"),
        ("bot.slack.app", "from bot.emulator.slack import FakeSlack"),
        ("bot.slack.actions", "from bot.store.approvals import ApprovalRecord"),
        ("bot.slack.app", "from bot.store.keys import Thread"),
        ("bot.records", "from bot.store.keys import Keys"),
        ("bot.records", "from bot.slack.cards import approval_card"),
        ("bot.turns.run", "importlib.import_module('bot.slack.app')"),
        ("bot.newroom.x", "import os"),
    ],
)
def test_a_wrong_import_is_reported(module: str, source: str) -> None:
    graph = {module: {n for n in imported_names(source, module) if n.split(".")[0] in PACKAGES}}
    assert violations(graph), f"{module}: {source}"


def test_a_cycle_is_reported() -> None:
    graph = {
        "tools.spec": {"tools.command"},
        "tools.command": {"tools.spec"},
        "tools.env": set(),
        "bot.llm.a": {"bot.llm.b"},
        "bot.llm.b": {"bot.llm.c"},
        "bot.llm.c": {"bot.llm.a"},
    }
    assert sorted(cycles(graph)) == [
        ["bot.llm.a", "bot.llm.b", "bot.llm.c"],
        ["tools.command", "tools.spec"],
    ]
