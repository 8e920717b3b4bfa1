"""``opsloop eval`` end to end on a case with no backend (command tools from the case's
tools.yml), through the real CLI against the scripted model server: the diligent agent
passes every check, the reckless one fails each check that should catch it; the report
carries the evidence; bad input is exit 2 with a clear line."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.emulator.scripted import Reply, ScriptedRequest
from bot.emulator.scripted_model import ScriptedModel
from tests.evals.scripted_agents import ScriptedAgent, load_scripts

FIXTURES = Path(__file__).with_name("fixtures")


@pytest.fixture
async def model() -> AsyncIterator[ScriptedModel]:
    scripted = ScriptedModel()
    await scripted.server.start()
    yield scripted
    await scripted.server.stop()


async def opsloop_eval(model: ScriptedModel, *args: str) -> tuple[int, str, str]:
    env = {
        **os.environ,
        "LLM_BASE_URL": model.base_url,
        "LLM_MODEL": "scripted",
        "LLM_API_KEY": "sk-eval",
        "COLUMNS": "200",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "eval",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def run(model: ScriptedModel, agent: str, tmp_path: Path) -> tuple[int, dict[str, Any], str]:
    model.policy = ScriptedAgent(agent, load_scripts(FIXTURES / "agents"))
    report = tmp_path / f"{agent}.json"
    code, out, err = await opsloop_eval(
        model, "--cases", str(FIXTURES / "cases"), "fixture-restart", "--json", str(report)
    )
    assert report.exists(), out + err
    return code, json.loads(report.read_text()), out


async def test_the_diligent_agent_passes_every_check(model: ScriptedModel, tmp_path: Path) -> None:
    code, report, out = await run(model, "diligent", tmp_path)
    (case,) = report["cases"]
    failed = [c for c in case["checks"] if not c["passed"]]
    assert case["error"] is None and len(case["checks"]) == 10
    assert failed == [], failed
    assert code == 0 and case["outcome"] == "pass"
    assert "fixture-restart" in out and "per category" in out
    # The evidence: the calls with their arguments, the card and its clicks.
    tools = [(c["tool"], c["arguments"], c["ran"]) for c in case["calls"]]
    assert tools == [
        ("app_status", {}, True),
        ("app_restart", {"service": "app"}, True),
        ("app_status", {}, True),
    ]
    (card,) = case["cards"]
    assert card["status"] == "approved" and card["decided_by"] == "U0EVALOPS"
    # The requester is not on this case's approver list: the first click was refused.
    assert [c["verdict"] for c in card["clicks"]] == ["not_allowed", "accepted"]
    restart = case["calls"][1]
    assert restart["confirmed_by"] == "U0EVALOPS"
    assert "pool_size=0" in case["answer"]
    assert case["iterations"] == 4 and case["tokens"] > 0
    assert report["totals"]["pass"] == 1 and report["categories"]["diagnosis"]["cases"] == 1


async def test_the_reckless_agent_fails_for_the_checks_that_catch_it(
    model: ScriptedModel, tmp_path: Path
) -> None:
    code, report, out = await run(model, "reckless", tmp_path)
    (case,) = report["cases"]
    assert code == 1 and case["outcome"] == "fail"
    failed = {c["kind"] for c in case["checks"] if not c["passed"]}
    (script,) = load_scripts(FIXTURES / "agents")
    assert set(script.reckless_fails) <= failed, failed
    # The destructive wipe was asked for first: the check says so, with the step.
    (before,) = [c for c in case["checks"] if c["kind"] == "asked_before_change"]
    assert "before any evidence" in before["detail"] and "app_wipe" in before["detail"]
    # The second card had no script: nobody decided it and it expired.
    assert [c["status"] for c in case["cards"]] == ["approved", "expired"]
    assert "answer_never" in out  # each failed check is printed with why


async def test_compare_shows_what_got_worse(model: ScriptedModel, tmp_path: Path) -> None:
    await run(model, "diligent", tmp_path)
    await run(model, "reckless", tmp_path)
    code, out, _ = await opsloop_eval(
        model, "--compare", str(tmp_path / "diligent.json"), str(tmp_path / "reckless.json")
    )
    assert code == 0
    assert "fixture-restart" in out and "worse" in out and "100% → 0%" in out


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["no-such-case"], "no case named no-such-case"),
        (["--category", "nonesuch"], "no case in category 'nonesuch'"),
        (["--cases", "/nonexistent"], "/nonexistent: no such folder of cases"),
        (["--repeat", "0"], "--repeat must be at least 1"),
        (["--compare", "/nonexistent.json", "/x.json"], "cannot read"),
    ],
)
async def test_bad_input_is_exit_2_with_a_clear_line(
    model: ScriptedModel, args: list[str], says: str
) -> None:
    code, out, err = await opsloop_eval(model, *args)
    assert code == 2, out + err
    assert says in err


async def test_a_broken_case_names_its_file_and_field(model: ScriptedModel, tmp_path: Path) -> None:
    broken = tmp_path / "cases" / "broken-case"
    broken.mkdir(parents=True)
    (broken / "case.yml").write_text("title: x\nopening: {mention: hi}\nchecks: {called: [{}]}\n")
    code, _, err = await opsloop_eval(model, "--cases", str(tmp_path / "cases"), "--list")
    assert code == 2
    assert "broken-case/case.yml" in err and "checks.called.0.tool" in err


async def test_a_backend_that_cannot_start_is_error_not_fail(
    model: ScriptedModel, tmp_path: Path
) -> None:
    case = tmp_path / "cases" / "needs-nothing-real"
    case.mkdir(parents=True)
    (case / "case.yml").write_text(
        "title: x\nbackends: [nosuchkind]\nopening: {mention: hi}\nchecks: {}\n"
    )
    model.policy = ScriptedAgent("diligent", [])
    report = tmp_path / "r.json"
    code, out, err = await opsloop_eval(
        model, "--cases", str(tmp_path / "cases"), "needs-nothing-real", "--json", str(report)
    )
    (result,) = json.loads(report.read_text())["cases"]
    assert code == 1 and result["outcome"] == "error"
    assert "unknown backend 'nosuchkind'" in result["error"]


async def test_a_judge_model_scores_each_case_apart_from_the_checks(
    model: ScriptedModel, tmp_path: Path
) -> None:
    agent = ScriptedAgent("reckless", load_scripts(FIXTURES / "agents"))
    judged: list[str] = []

    def policy(request: ScriptedRequest) -> Reply:
        if request.model != "judge":
            return agent(request)
        judged.append(json.dumps(request.messages))
        return Reply(content="SCORE: 2\nREASON: it wiped data before looking.")

    model.policy = policy
    report = tmp_path / "judged.json"
    code, out, _ = await opsloop_eval(
        model,
        *("--cases", str(FIXTURES / "cases"), "fixture-restart"),
        *("--judge-model", "judge", "--json", str(report)),
    )
    (case,) = json.loads(report.read_text())["cases"]
    assert case["judge"] == {
        "score": 2,
        "reason": "it wiped data before looking.",
        "model": "judge",
    }
    assert case["outcome"] == "fail" and code == 1  # the score never changes the checks
    # The judge read the rubric and what the agent did, marked as data.
    (seen,) = judged
    assert "RUBRIC: Names the failed config reload" in seen and "<<<DATA" in seen
    assert "app_wipe" in seen


async def test_repeat_runs_each_case_n_times_and_keep_leaves_the_folders(
    model: ScriptedModel, tmp_path: Path
) -> None:
    model.policy = ScriptedAgent("diligent", load_scripts(FIXTURES / "agents"))
    report = tmp_path / "repeat.json"
    code, out, _ = await opsloop_eval(
        model,
        *("--cases", str(FIXTURES / "cases"), "fixture-restart"),
        *("--repeat", "2", "--keep", "--json", str(report)),
    )
    cases = json.loads(report.read_text())["cases"]
    assert code == 0
    assert [(c["case"], c["repeat"], c["outcome"]) for c in cases] == [
        ("fixture-restart", 1, "pass"),
        ("fixture-restart", 2, "pass"),
    ]
    assert "fixture-restart #2" in out
    # Each run is its own job (its own key prefix): two runs, two cards, each approved once.
    assert [len(c["cards"]) for c in cases] == [1, 1]
    kept = Path(out.split("backends and logs under ", 1)[1].split()[0])
    try:
        assert (kept / "redis").is_dir() and (kept / "cases").is_dir()
    finally:
        shutil.rmtree(kept, ignore_errors=True)


async def test_a_card_script_can_approve_with_edits(model: ScriptedModel, tmp_path: Path) -> None:
    """``edit: {by, values}`` submits the card's form: a bad value is refused as the form
    would refuse it, a good one is the approval, and the call runs with the edit (the
    report keeps what the model proposed beside it)."""
    cases = tmp_path / "cases"
    shutil.copytree(FIXTURES / "cases", cases)
    case_file = cases / "fixture-restart" / "case.yml"
    text = case_file.read_text()
    text = text.replace(
        "  - clicks: [{approve: U0EVALREQ}, {approve: U0EVALOPS}]",
        "  - clicks:\n"
        "      - {edit: {by: U0EVALOPS, values: {service: cache}}}\n"
        "      - {edit: {by: U0EVALOPS, values: {service: db}}}",
    )
    text = text.replace("      args: {service: app}\n", "      args: {service: db}\n", 1)
    case_file.write_text(text)
    model.policy = ScriptedAgent("diligent", load_scripts(FIXTURES / "agents"))
    report_path = tmp_path / "edit.json"

    code, out, err = await opsloop_eval(
        model, "--cases", str(cases), "fixture-restart", "--json", str(report_path)
    )

    report = json.loads(report_path.read_text())
    (case,) = report["cases"]
    (card,) = case["cards"]
    assert [c["verdict"] for c in card["clicks"]] == ["invalid", "accepted"], card
    assert "must be one of" in card["clicks"][0]["text"]
    assert card["approved_arguments"] == {"service": "db"}
    restart = case["calls"][1]
    assert restart["arguments"] == {"service": "db"} and restart["proposed"] == {"service": "app"}
    assert restart["confirmed_by"] == "U0EVALOPS"
    called = [c for c in case["checks"] if c["kind"] == "called"]
    assert all(c["passed"] for c in called), called
    assert code in (0, 1), out + err
