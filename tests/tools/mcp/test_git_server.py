"""The reference ``mcp-server-git`` (PyPI; nobody on this team wrote it) on a temporary
repository, through our catalogue and the agent.

Its read tools run without anyone approving once the operator says they are read-only
(a ``tools:`` override, or ``trust_annotations: true`` over the server's
``readOnlyHint``); a tool that changes the repository is ``mutating`` (its hints never
lower that), so without an approval it does not run and the repository is as it was; an
approved call changes the repository exactly once; ``git_reset``, hinted destructive, is
``destructive`` whatever the trust and gets a card without a dry run."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bot.agent import (
    Approved,
    ConfirmRequest,
    Decision,
    Denied,
    InMemoryHistory,
    Pending,
    RunResult,
    StopReason,
    ToolMessage,
    UserMessage,
    run,
)
from bot.agent.config import AgentConfig
from bot.agent.events import Event, ToolStart
from bot.agent.messages import ToolCall
from bot.agent.state import RunState
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.agent.tools import Tool, has_dry_run
from tests.tools.mcp.conftest import Connect, git
from tools.mcp.tool import McpTool
from tools.registry import Catalog

WAIT_S = 60.0
APPROVER = "U0APPROVER"

# What mcp-server-git 2026.10.19 declares (server.py: READ_ONLY and writes()), as
# (readOnlyHint, destructiveHint).
READ_TOOLS = (
    "git_status",
    "git_diff_unstaged",
    "git_diff_staged",
    "git_diff",
    "git_log",
    "git_show",
    "git_branch",
)
WRITE_TOOLS = ("git_commit", "git_add", "git_create_branch", "git_checkout")
HINTS = {
    **{name: (True, False) for name in READ_TOOLS},
    **{name: (False, False) for name in WRITE_TOOLS},
    "git_reset": (False, True),
}


def entry(argv: Sequence[str], extra: str = "") -> str:
    return f"""
        mcp_servers:
          - name: repo
            command: {json.dumps(list(argv))}
        {extra}"""


def environ(tmp_path: Path) -> dict[str, str]:
    """The server's environment: git on PATH, a HOME without a git config of anyone's."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"PATH": os.environ["PATH"], "HOME": str(home)}


@dataclass(frozen=True)
class RepoState:
    head: str
    commits: int
    branches: tuple[str, ...]
    status: str
    index: str


def snapshot(repo: Path) -> RepoState:
    return RepoState(
        head=git(repo, "rev-parse", "HEAD").strip(),
        commits=int(git(repo, "rev-list", "--count", "HEAD")),
        branches=tuple(git(repo, "branch", "--format=%(refname:short)").split()),
        status=git(repo, "status", "--porcelain"),
        index=git(repo, "ls-files", "--stage"),
    )


class Confirmer:
    """Answers each approval request with the next decision, and keeps the requests."""

    def __init__(self, *decisions: Decision) -> None:
        self.decisions = list(decisions)
        self.requests: list[ConfirmRequest] = []

    async def __call__(self, request: ConfirmRequest) -> Decision:
        self.requests.append(request)
        return self.decisions.pop(0)


def agent(
    model: ScriptedModel,
    tools: Sequence[Tool],
    confirm: Confirmer | None = None,
    memory: InMemoryHistory | None = None,
    events: list[Event] | None = None,
) -> AgentConfig:
    if memory is None:
        memory = InMemoryHistory()
        memory.append(UserMessage(content="look after the repository"))
    return AgentConfig(
        job_id="job-1",
        client=model,
        memory=memory,
        system_prompt="SRE",
        tools=list(tools),
        confirm=confirm,
        on_event=None if events is None else events.append,
    )


async def bounded_run(
    config: AgentConfig, state: RunState | None = None, decision: Decision | None = None
) -> RunResult:
    async with asyncio.timeout(WAIT_S):
        return await run(config, state, decision)


def results(model: ScriptedModel, request: int) -> dict[str, ToolMessage]:
    """The tool results in the model's ``request``-th request, by call id."""
    return {
        m.tool_call_id: m for m in model.requests[request].messages if isinstance(m, ToolMessage)
    }


def tool_call(name: str, call_id: str, **arguments: object) -> ToolCall:
    return call(f"repo_{name}", call_id, **arguments)


async def test_the_servers_hints_and_the_categories_we_derive(
    connect: Connect, git_server: list[str], tmp_path: Path
) -> None:
    untrusted = await connect(entry(git_server), environ=environ(tmp_path))
    trusted = await connect(
        entry(git_server, "    trust_annotations: true"), environ=environ(tmp_path)
    )
    some = untrusted.tools["repo_git_status"]
    assert isinstance(some, McpTool)
    listed = await some.connection.relist()
    hints = {
        t.name: (t.annotations.read_only_hint, t.annotations.destructive_hint)
        for t in listed
        if t.annotations is not None
    }
    assert hints == HINTS  # the installed version declares what its source says

    def decided(catalog: Catalog, name: str) -> tuple[str, str]:
        tool = catalog.tools[name]
        assert isinstance(tool, McpTool)
        return tool.category, tool.category_reason

    assert {n for n in untrusted.tools if untrusted.sources[n] == "mcp:repo"} == {
        f"repo_{name}" for name in HINTS
    }
    for name in READ_TOOLS + WRITE_TOOLS:
        # readOnlyHint: true counts for nothing without trust_annotations.
        assert decided(untrusted, f"repo_{name}") == ("mutating", "default"), name
    for name in READ_TOOLS:
        assert decided(trusted, f"repo_{name}") == ("read_only", "annotation"), name
    for name in WRITE_TOOLS:
        assert decided(trusted, f"repo_{name}") == ("mutating", "default"), name
    for catalog in (untrusted, trusted):
        assert decided(catalog, "repo_git_reset") == ("destructive", "annotation")


async def test_read_tools_made_read_only_by_an_override_run_without_an_approver(
    connect: Connect, git_server: list[str], tmp_path: Path
) -> None:
    repo = Path(git_server[-1])
    overrides = "\n".join(
        f"              {name}: {{category: read_only, parallel: true}}"
        for name in ("git_status", "git_log", "git_diff", "git_diff_unstaged")
    )
    catalog = await connect(
        entry(git_server, "    tools:\n" + overrides), environ=environ(tmp_path)
    )
    tools = [catalog.tools[f"repo_{n}"] for n in ("git_status", "git_log", "git_diff")]
    tools.append(catalog.tools["repo_git_diff_unstaged"])
    assert [(t.category, t.parallel) for t in tools] == [("read_only", True)] * 4
    before = snapshot(repo)
    first, second = git(repo, "rev-list", "--reverse", "HEAD").split()
    model = ScriptedModel(
        [
            calls(
                tool_call("git_status", "c1", repo_path=str(repo)),
                tool_call("git_log", "c2", repo_path=str(repo), max_count=5),
                tool_call("git_diff", "c3", repo_path=str(repo), target="HEAD~1"),
                tool_call("git_diff_unstaged", "c4", repo_path=str(repo)),
            ),
            text("looked"),
        ]
    )
    result = await bounded_run(agent(model, tools))  # no confirm: nobody could approve
    assert result.output == "looked", result.error
    assert result.tool_executions == 4
    out = results(model, 1)
    assert not any(m.is_error for m in out.values()), out
    assert "modified:   README.md" in out["c1"].content
    log = out["c2"].content
    assert log.startswith("Commit history:")
    assert f"Commit: {second}" in log and f"Commit: {first}" in log
    assert log.index("Message: second") < log.index("Message: first")
    diff = out["c3"].content
    assert diff.startswith("Diff with HEAD~1:") and "+two\n" in diff and "+three" in diff
    unstaged = out["c4"].content
    assert "+three" in unstaged and "+two" not in unstaged
    assert snapshot(repo) == before
    model.assert_done()


async def test_trusted_hints_make_reads_read_only_but_not_writes(
    connect: Connect, git_server: list[str], tmp_path: Path
) -> None:
    repo = Path(git_server[-1])
    catalog = await connect(
        entry(git_server, "    trust_annotations: true"), environ=environ(tmp_path)
    )
    names = ("git_show", "git_branch", "git_create_branch")
    tools = [catalog.tools[f"repo_{n}"] for n in names]
    before = snapshot(repo)
    model = ScriptedModel(
        [
            calls(
                tool_call("git_show", "c1", repo_path=str(repo), revision="HEAD"),
                tool_call("git_branch", "c2", repo_path=str(repo), branch_type="local"),
                tool_call("git_create_branch", "c3", repo_path=str(repo), branch_name="hotfix"),
            ),
            text("done"),
        ]
    )
    result = await bounded_run(agent(model, tools))
    assert result.output == "done", result.error
    out = results(model, 1)
    assert out["c1"].content.startswith(f"commit {before.head}\n"), out["c1"].content
    assert "    second\n" in out["c1"].content and "+two" in out["c1"].content
    assert out["c2"].content.strip() == "* main"
    assert out["c3"].is_error
    assert out["c3"].content.startswith("Error: declined: this tool changes things"), out["c3"]
    assert snapshot(repo) == before  # no hotfix branch
    model.assert_done()


async def test_a_write_without_an_approval_does_not_run(
    connect: Connect, git_server: list[str], tmp_path: Path
) -> None:
    repo = Path(git_server[-1])
    catalog = await connect(entry(git_server), environ=environ(tmp_path))
    tools = [catalog.tools["repo_git_add"], catalog.tools["repo_git_create_branch"]]
    before = snapshot(repo)
    assert before.status == " M README.md\n" and before.branches == ("main",)
    confirm = Confirmer(
        Denied(reason="denied by <@U0REVIEWER>"), Denied(reason="denied by <@U0REVIEWER>")
    )
    model = ScriptedModel(
        [
            calls(
                tool_call("git_add", "c1", repo_path=str(repo), files=["README.md"]),
                tool_call("git_create_branch", "c2", repo_path=str(repo), branch_name="hotfix"),
            ),
            text("left it"),
        ]
    )
    result = await bounded_run(agent(model, tools, confirm))
    assert result.output == "left it", result.error
    assert [(r.tool, r.category, r.call_id) for r in confirm.requests] == [
        ("repo_git_add", "mutating", "c1"),
        ("repo_git_create_branch", "mutating", "c2"),
    ]
    assert confirm.requests[0].arguments == {"repo_path": str(repo), "files": ["README.md"]}
    assert confirm.requests[1].dry_run_output is None  # only destructive tools get one
    out = results(model, 1)
    for call_id in ("c1", "c2"):
        assert out[call_id].is_error
        assert out[call_id].content == "Error: declined: denied by <@U0REVIEWER>"
    assert result.tool_executions == 0
    assert snapshot(repo) == before  # nothing staged, no branch
    model.assert_done()


async def test_an_approved_commit_after_a_pause_lands_exactly_once(
    connect: Connect, git_server: list[str], tmp_path: Path
) -> None:
    repo = Path(git_server[-1])
    catalog = await connect(entry(git_server), environ=environ(tmp_path))
    tools = [catalog.tools["repo_git_add"], catalog.tools["repo_git_commit"]]
    (repo / "notes.txt").write_text("restarted nginx at 03:12\n")
    before = snapshot(repo)
    assert before.status == " M README.md\n?? notes.txt\n"
    model = ScriptedModel(
        [
            calls(tool_call("git_add", "c1", repo_path=str(repo), files=["notes.txt"])),
            calls(tool_call("git_commit", "c2", repo_path=str(repo), message="notes: add")),
            text("committed"),
        ]
    )
    memory = InMemoryHistory()
    memory.append(UserMessage(content="commit the incident notes"))

    asked = Confirmer(Pending())
    paused = await bounded_run(agent(model, tools, asked, memory))
    assert paused.stop_reason is StopReason.AWAITING_APPROVAL, paused.error
    assert paused.approval is not None and paused.approval.tool == "repo_git_add"
    assert [r.category for r in asked.requests] == ["mutating"]
    assert snapshot(repo) == before  # waiting for the human: nothing staged yet

    approval = paused.approval
    resumed = Confirmer(Approved(confirmed_by=APPROVER))  # for the commit, asked afresh
    result = await bounded_run(
        agent(model, tools, resumed, memory),
        paused.state,
        Approved(confirmed_by=APPROVER, tool=approval.tool, args_hash=approval.args_hash),
    )
    assert result.output == "committed", result.error
    assert [r.tool for r in resumed.requests] == ["repo_git_commit"]
    assert result.tool_executions == 2

    after = snapshot(repo)
    assert after.commits == before.commits + 1
    assert git(repo, "rev-parse", "HEAD~1").strip() == before.head
    assert git(repo, "log", "-1", "--format=%s").strip() == "notes: add"
    assert git(repo, "show", "--name-only", "--format=", "HEAD").split() == ["notes.txt"]
    assert after.status == " M README.md\n"  # only what was added went in
    added = results(model, 1)["c1"]
    assert (added.content, added.confirmed_by) == ("Files staged successfully", APPROVER)
    committed = results(model, 2)["c2"]
    assert committed.content == f"Changes committed successfully with hash {after.head}"
    assert committed.confirmed_by == APPROVER
    model.assert_done()


async def test_git_reset_is_destructive_and_asked_for_without_a_dry_run(
    connect: Connect, git_server: list[str], tmp_path: Path
) -> None:
    repo = Path(git_server[-1])
    catalog = await connect(
        entry(git_server, "    trust_annotations: true"), environ=environ(tmp_path)
    )
    tool = catalog.tools["repo_git_reset"]
    assert tool.category == "destructive" and not has_dry_run(tool)
    git(repo, "add", "README.md")
    before = snapshot(repo)
    assert before.status == "M  README.md\n"
    confirm = Confirmer(Denied(reason="denied by <@U0REVIEWER>"))
    model = ScriptedModel(
        [calls(tool_call("git_reset", "c1", repo_path=str(repo))), text("kept it staged")]
    )
    events: list[Event] = []
    result = await bounded_run(agent(model, [tool], confirm, events=events))
    assert result.output == "kept it staged", result.error
    [request] = confirm.requests
    # Asked without a dry run (the card says none is available): the server was not called.
    assert (request.category, request.dry_run_output) == ("destructive", None)
    assert not [e for e in events if isinstance(e, ToolStart)]
    assert results(model, 1)["c1"].content == "Error: declined: denied by <@U0REVIEWER>"
    assert snapshot(repo) == before  # still staged
    model.assert_done()


async def test_the_servers_refusals_are_error_results(
    connect: Connect, git_server: list[str], tmp_path: Path
) -> None:
    repo = Path(git_server[-1])
    catalog = await connect(
        entry(git_server, "    trust_annotations: true"), environ=environ(tmp_path)
    )
    tools = [catalog.tools["repo_git_diff"], catalog.tools["repo_git_status"]]
    model = ScriptedModel(
        [
            calls(
                tool_call("git_diff", "c1", repo_path=str(repo), target="no-such-ref"),
                tool_call("git_status", "c2", repo_path=str(tmp_path)),
            ),
            text("both failed"),
        ]
    )
    result = await bounded_run(agent(model, tools))
    assert result.output == "both failed", result.error
    out = results(model, 1)
    assert out["c1"].is_error and out["c1"].content.startswith("Error: mcp server 'repo': ")
    assert "Ref 'no-such-ref' did not resolve" in out["c1"].content
    assert out["c2"].is_error and out["c2"].content.startswith("Error: mcp server 'repo': ")
    assert "is outside the allowed repository" in out["c2"].content  # --repository holds
    model.assert_done()
