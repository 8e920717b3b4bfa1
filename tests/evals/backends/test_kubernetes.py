"""The ``kubernetes`` eval backend (``bot.evals.backends.kubernetes``): the fake API server
it starts, seen through the kubernetes pack's real tools (built by ``load_packs`` with the
``Reach`` it returns, ``KUBECONFIG`` in the environment as the runner sets it) and through
a real ``kubectl`` when one is installed.

Each fault's evidence is visible, and gone once it heals; ``reset`` undoes what an
approved delete or scale did; ``stop`` closes the port. The kubernetes cases' diligent
agent scripts (``tests/evals/agents/``) are replayed against the faults: each read-only
step's ``${re:…}`` resolves (``tests.evals.scripted_agents.fill``) from the tools' real
answers, and the answer they make meets
the case's ``answer_mentions`` and ``answer_never`` (the ``called`` checks too).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.agent.tools import CallContext
from bot.emulator.kube_env import kubectl, kubectls
from bot.evals.backends import BackendError, Reach, backend_class
from bot.evals.backends.kubernetes import KubernetesBackend, baseline, utc_now
from bot.evals.case import CallCheck, Case, load_case
from tests.evals.scripted_agents import fill, fill_value
from tools.packs import Pack, PackConfig, load_packs

ROOT = Path(__file__).parents[3]
CASES = ROOT / "bot" / "evals" / "cases"
AGENTS = ROOT / "tests" / "evals" / "agents"
KUBE_CASES = sorted(
    p.name for p in CASES.iterdir() if (p / "case.yml").is_file() and "k8s" in p.name
)
TEMPLATE = re.compile(r"\$\{re:(.+?)\}")
READ_ONLY = ("k8s_get", "k8s_describe", "k8s_logs", "k8s_events")


@dataclass
class Started:
    backend: KubernetesBackend
    reach: Reach
    pack: Pack

    async def call(self, tool_name: str, /, **args: Any) -> str:
        """Through the argument model and ``execute``, as the agent core calls it."""
        chosen = next(t for t in self.pack.tools if t.name == tool_name)
        model = chosen.args_model.model_validate(args)
        ctx = CallContext(job_id="C0EVAL:1.1:j1", call_id="c1", dry_run=False, confirmed_by="U1")
        result = await chosen.execute(model, ctx)
        assert isinstance(result, str)
        return result


@pytest.fixture
async def started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Started]:
    backend = KubernetesBackend()
    reach = await backend.start(tmp_path / "kubernetes")
    for name, value in reach.environ.items():  # as the runner does, before building packs
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    packs = load_packs(reach.packs, PackConfig(**reach.pack_config))
    port = backend.kube.port
    yield Started(backend, reach, packs["kubernetes"])
    for close in packs["kubernetes"].closers:
        await close()
    await backend.stop()
    with pytest.raises(OSError):  # nothing listens any more
        await asyncio.open_connection("127.0.0.1", port)


async def test_the_kind_resolves_and_reach_names_the_pack(started: Started) -> None:
    assert backend_class("kubernetes") is KubernetesBackend
    assert started.reach.packs == ("kubernetes",)
    written = await asyncio.to_thread(Path(started.reach.environ["KUBECONFIG"]).read_text)
    config = json.loads(written)
    assert config["current-context"] == started.reach.pack_config["k8s_context"]
    assert config["clusters"][0]["cluster"]["server"] == started.backend.kube.url
    assert started.backend.kube.url.startswith("https://127.0.0.1:")


async def test_the_baseline_is_healthy(started: Started) -> None:
    pods = await started.call("k8s_get", kind="pods")
    assert "need" not in pods.splitlines()[0] and "12 Running" in pods.splitlines()[0]
    deployments = await started.call("k8s_get", kind="deployments")
    assert "6 fully ready" in deployments.splitlines()[0]
    assert "Warning" not in await started.call("k8s_events")
    names = {line.split()[0] for line in pods.splitlines()[2:]}
    assert {"web", "payments", "shop"} <= names


# fault → (params, calls with {fact} placeholders, what their answers show)
EVIDENCE: dict[str, tuple[dict[str, str], list[tuple[str, dict[str, Any]]], list[str]]] = {
    "crashloop_bad_env": (
        {},
        [
            ("k8s_get", {"kind": "pods", "namespace": "shop"}),
            ("k8s_logs", {"pod": "{pod}", "namespace": "shop", "previous": True}),
        ],
        [
            "{pod}  0/1    CrashLoopBackOff",
            "last exit Error (exit 1)",
            "KeyError: 'PAYMENTS_API_URL'",
            "missing required env var PAYMENTS_API_URL",
        ],
    ),
    "oomkilled": (
        {},
        [
            ("k8s_describe", {"kind": "pods", "name": "{pod}", "namespace": "payments"}),
            ("k8s_logs", {"pod": "{pod}", "namespace": "payments", "previous": True}),
            ("k8s_events", {"warnings_only": True}),
        ],
        [
            "Last state: Terminated OOMKilled (exit 137)",
            "limits cpu=500m,memory=256Mi",
            "of 256Mi limit",
            "OOMKilling",
        ],
    ),
    "image_pull_backoff": (
        {},
        [
            ("k8s_describe", {"kind": "pods", "name": "{pod}", "namespace": "shop"}),
            ("k8s_events", {"namespace": "shop"}),
        ],
        [
            "pod shop/{pod}: ImagePullBackOff",
            'Failed to pull image "registry.example/cart:v4.3.0"',
            "code = NotFound",
            "Error: ErrImagePull",
        ],
    ),
    "stuck_rollout": (
        {},
        [
            ("k8s_describe", {"kind": "deployments", "name": "api", "namespace": "web"}),
            ("k8s_describe", {"kind": "pods", "name": "{pod}", "namespace": "web"}),
            ("k8s_logs", {"pod": "{pod}", "namespace": "web"}),
        ],
        [
            "Progressing=False ProgressDeadlineExceeded",
            "Readiness probe failed: HTTP probe failed with statuscode: 503",
            "migration 0042_add_order_index has not been applied",
            "{pod}  Running  0/1 ready",
        ],
    ),
    "pending_resources": (
        {},
        [
            ("k8s_get", {"kind": "pods", "namespace": "payments"}),
            ("k8s_describe", {"kind": "pods", "name": "{pod}", "namespace": "payments"}),
            ("k8s_describe", {"kind": "nodes", "name": "node-a", "namespace": "default"}),
        ],
        [
            "2 Pending: Unschedulable",
            "0/3 nodes are available: 3 Insufficient cpu",
            "requests cpu=6",
            "Allocatable: cpu=4",
        ],
    ),
    "wedged_pod": (
        {},
        [
            ("k8s_get", {"kind": "pods", "namespace": "web"}),
            ("k8s_describe", {"kind": "pods", "name": "{pod}", "namespace": "web"}),
            ("k8s_logs", {"pod": "{pod}", "namespace": "web"}),
        ],
        [
            "{pod}       0/1    Running",
            "Readiness probe failed",
            "deadlock detected",
        ],
    ),
}


def test_every_fault_has_evidence_checked() -> None:
    assert set(EVIDENCE) == set(KubernetesBackend.faults)


@pytest.mark.parametrize("fault", sorted(EVIDENCE))
async def test_a_fault_shows_through_the_tools_and_heals(started: Started, fault: str) -> None:
    params, calls, expected = EVIDENCE[fault]
    async with started.backend.fault(fault, params) as facts:
        assert {"namespace", "deployment", "pod"} <= set(facts)
        answers = [
            await started.call(tool, **{k: _put(v, facts) for k, v in args.items()})
            for tool, args in calls
        ]
        seen = "\n".join(answers)
        for text in expected:
            assert text.format(**facts) in seen, (text, seen)
        namespace = facts["namespace"]
    healed = await started.call("k8s_get", kind="pods", namespace=namespace)
    assert "need" not in healed.splitlines()[0], healed
    assert facts["pod"] not in healed or fault in ("oomkilled", "wedged_pod")


def _put(value: Any, facts: Mapping[str, str]) -> Any:
    return value.format(**facts) if isinstance(value, str) else value


async def test_reset_undoes_approved_changes(started: Started) -> None:
    kube = started.backend.kube
    pods = await started.call("k8s_get", kind="pods", namespace="web")
    victim = pods.splitlines()[2].split()[0]
    deleted = await started.call("k8s_delete_pod", name=victim, namespace="web")
    assert deleted.startswith(f"Deleted pod web/{victim}")
    await started.call("k8s_scale", kind="deployments", name="cart", namespace="shop", replicas=0)
    assert kube.cluster.get("pods", "web", victim) is None
    assert kube.cluster.need("deployments", "shop", "cart")["spec"]["replicas"] == 0
    deletes = kube.received("DELETE", f"/pods/{victim}")
    assert len(deletes) == 1 and deletes[0].query.get("dryRun") is None
    await started.backend.reset()
    assert kube.cluster.get("pods", "web", victim) is not None
    assert kube.cluster.need("deployments", "shop", "cart")["spec"]["replicas"] == 2
    assert kube.requests == []
    assert victim in await started.call("k8s_get", kind="pods", namespace="web")


async def test_unknown_faults_and_parameters_are_refused(started: Started) -> None:
    with pytest.raises(BackendError, match="no fault 'disk_full'"):
        async with started.backend.fault("disk_full", {}):
            pass
    with pytest.raises(BackendError, match="not replicas"):
        async with started.backend.fault("oomkilled", {"replicas": 3}):
            pass
    with pytest.raises(BackendError, match="no deployment shop/nope"):
        async with started.backend.fault("oomkilled", {"namespace": "shop", "deployment": "nope"}):
            pass


async def test_a_real_kubectl_sees_the_fault(started: Started) -> None:
    binaries = kubectls()
    if not binaries:
        pytest.skip("no kubectl installed")
    config = Path(started.reach.environ["KUBECONFIG"])
    async with started.backend.fault("crashloop_bad_env", {}) as facts:
        done = await kubectl(binaries[0], config, "get", "pods", "-n", "shop")
        assert done.returncode == 0, done.stderr
        row = next(line for line in done.stdout.splitlines() if line.startswith(facts["pod"]))
        assert "CrashLoopBackOff" in row
        logs = await kubectl(binaries[0], config, "logs", "-n", "shop", facts["pod"], "--previous")
        assert "KeyError: 'PAYMENTS_API_URL'" in logs.stdout


def test_the_baseline_is_built_fresh() -> None:
    now = utc_now()
    first, second = baseline(now), baseline(now)
    assert first.objects == second.objects and first.objects is not second.objects
    assert first.count("pods") == 12 and first.count("deployments") == 6


# -- the kubernetes cases' diligent agents, replayed ----------------------------------


def _unresolved(value: Any, results: list[str]) -> list[str]:
    """The ``${re:…}`` templates in ``value`` that match nothing in ``results``."""
    if isinstance(value, dict):
        return [t for v in value.values() for t in _unresolved(v, results)]
    if not isinstance(value, str):
        return []
    return [t for t in TEMPLATE.findall(value) if fill("${re:" + t + "}", results) == "?"]


def _holds(predicate: Any, given: Any) -> bool:
    """A ``CallCheck`` argument predicate (``bot.evals.case.CallCheck``) on a value."""
    if not isinstance(predicate, dict):
        return str(given).lower() == str(predicate).lower()
    ((op, want),) = predicate.items()
    if op == "equals":
        return str(given) == str(want)
    if op == "in":
        return str(given) in [str(w) for w in want]
    if op == "matches":
        return given is not None and re.search(str(want), str(given), re.I) is not None
    if op == "contains":
        return str(want).lower() in str(given).lower()
    return given is None  # absent


def _meets(check: CallCheck, tool: str, args: Mapping[str, Any]) -> bool:
    return check.tool == tool and all(
        _holds(predicate, args.get(name)) for name, predicate in check.args.items()
    )


@pytest.mark.parametrize("name", KUBE_CASES)
async def test_the_diligent_script_finds_its_evidence(started: Started, name: str) -> None:
    case: Case = load_case(CASES / name)
    script = yaml.safe_load((AGENTS / f"{name}.yml").read_text())
    assert case.backends == ["kubernetes"] and len(case.faults) == 1
    fault = case.faults[0]
    async with started.backend.fault(fault.name, fault.params) as facts:
        case = case.with_facts(facts)
        opening = case.opening.mention or json.dumps(case.alert_payload())
        assert script["match"] in opening
        results: list[str] = []
        ran: list[tuple[str, dict[str, Any]]] = []
        answer = ""
        for step in script["diligent"]:
            if "answer" in step:
                assert not _unresolved(step["answer"], results), step["answer"]
                answer = fill(step["answer"], results)
                break
            for call in step["calls"]:
                assert not _unresolved(call.get("args", {}), results), call
                args = fill_value(call.get("args", {}), results)
                ran.append((call["tool"], args))
                if call["tool"] in READ_ONLY:
                    results.append(await started.call(call["tool"], **args))
                else:  # a change: the card is not decided here
                    results.append("Error: declined: approval expired")
    assert answer
    lowered = answer.lower()
    for group in case.checks.answer_mentions:
        assert any(alt.lower() in lowered for alt in group), (group, answer)
    for never in case.checks.answer_never:
        assert never.lower() not in lowered, (never, answer)
    for check in case.checks.called:
        assert any(_meets(check, t, a) for t, a in ran if t in READ_ONLY), check
    for check in case.checks.proposed:
        assert any(_meets(check, t, a) for t, a in ran), check
    for check in case.checks.never:
        assert not any(_meets(check, t, a) for t, a in ran), check


@pytest.mark.parametrize("name", KUBE_CASES)
def test_the_reckless_script_breaks_a_check(name: str) -> None:
    """What the reckless agent asks for or says is caught by a check its file names."""
    case = load_case(CASES / name)
    script = yaml.safe_load((AGENTS / f"{name}.yml").read_text())
    fails = set(script["reckless_fails"])
    assert fails and fails <= {
        "answer_mentions",
        "answer_never",
        "called",
        "proposed",
        "never",
        "asked_before_change",
        "max_iterations",
    }
    calls = [c for step in script["reckless"] for c in step.get("calls", [])]
    answer = next(s["answer"] for s in script["reckless"] if "answer" in s).lower()
    if "never" in fails:
        assert any(
            _meets(check, c["tool"], c.get("args", {}))
            for check in case.checks.never
            for c in calls
        )
    if "asked_before_change" in fails:
        assert case.checks.asked_before_change and calls[0]["tool"] not in READ_ONLY
    if "answer_mentions" in fails:
        assert not all(
            any(alt.lower() in answer for alt in group) for group in case.checks.answer_mentions
        )
    if "answer_never" in fails:
        assert any(n.lower() in answer for n in case.checks.answer_never)
