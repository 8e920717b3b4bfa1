"""The runbook for an alert: named in front matter, or where its ``runbook_url`` points."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.errors import ConfigError
from bot.knowledge.runbooks import READ_BOUND, Runbooks
from tests.knowledge.runbook_corpus import BROKEN, write_corpus

BASE = "https://git.example.com/sre/runbooks/blob/main/"


@pytest.fixture
def runbooks(tmp_path: Path) -> Runbooks:
    return Runbooks(write_corpus(tmp_path), base_url=BASE)


def test_for_alert_finds_the_runbook_naming_it(runbooks: Runbooks) -> None:
    found = runbooks.for_alert("KubePodCrashLooping")
    assert found is not None
    assert (found.ref, found.title) == ("k8s/crashloop.md", "Pod in CrashLoopBackOff")
    assert found.text.startswith("Runbook: Pod in CrashLoopBackOff (k8s/crashloop.md)\n\n")
    assert "kubectl logs POD --previous" in found.text
    # a second alert of the same file
    other = runbooks.for_alert("HostOutOfInodes")
    assert other is not None and other.ref == "linux/disk-full.md"


def test_for_alert_is_exact_and_case_sensitive(runbooks: Runbooks) -> None:
    assert runbooks.for_alert("kubepodcrashlooping") is None
    assert runbooks.for_alert("KubePodCrash") is None
    assert runbooks.for_alert("SomethingBroken") is None  # only the broken file names it


def test_of_several_runbooks_the_shortest_path_wins(tmp_path: Path) -> None:
    (tmp_path / "teams" / "api").mkdir(parents=True)
    (tmp_path / "teams" / "api" / "down.md").write_text("---\nalerts: [ApiDown]\n---\n# Team\n")
    (tmp_path / "api-down.md").write_text("---\nalerts: [ApiDown]\n---\n# Main\n")
    found = Runbooks(tmp_path).for_alert("ApiDown")
    assert found is not None and found.ref == "api-down.md"


def test_for_alert_is_bounded(tmp_path: Path) -> None:
    body = "".join(f"{n}. step {n}\n" for n in range(5000))
    (tmp_path / "big.md").write_text(f"---\nalerts: [Big]\n---\n# Big\n\n{body}")
    found = Runbooks(tmp_path).for_alert("Big")
    assert found is not None and len(found.text) <= READ_BOUND
    assert "[cut here: the runbook is" in found.text


@pytest.mark.parametrize(
    ("url", "ref"),
    [
        (BASE + "k8s/crashloop.md", "k8s/crashloop.md"),
        (BASE + "k8s/crashloop.md#roll-back", "k8s/crashloop.md#roll-back"),
        (BASE + "k8s/crashloop", "k8s/crashloop.md"),
        (BASE + "k8s/crashloop.html#symptoms", "k8s/crashloop.md#symptoms"),
        (
            BASE + "linux/disk-full.md?plain=1#free-space-on-var",
            "linux/disk-full.md#free-space-on-var",
        ),
        (BASE + "k8s%2Fcrashloop.md", "k8s/crashloop.md"),
        (BASE + "/k8s/crashloop.md", "k8s/crashloop.md"),
        # an unknown fragment still brings the runbook
        (BASE + "k8s/crashloop.md#gone", "k8s/crashloop.md"),
    ],
)
def test_for_url_under_the_base_reads_that_file(runbooks: Runbooks, url: str, ref: str) -> None:
    found = runbooks.for_url(url)
    assert found is not None and found.ref == ref
    assert found.text.startswith(f"Runbook: {found.title} ({ref})\n\n")


@pytest.mark.parametrize(
    "url",
    [
        BASE + "../secrets.md",
        BASE + "k8s/../../etc/passwd",
        BASE + "%2e%2e/%2e%2e/etc/passwd",
        BASE + "k8s/..%2F..%2Fsecret.md",
        BASE + "..\\secret.md",
    ],
)
def test_for_url_refuses_to_leave_the_folder(
    runbooks: Runbooks, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert runbooks.for_url(url) is None
    assert "leaves the runbooks folder" in caplog.text


def test_for_url_elsewhere_or_unknown_is_none(runbooks: Runbooks, tmp_path: Path) -> None:
    assert runbooks.for_url("https://evil.example.com/k8s/crashloop.md") is None
    assert runbooks.for_url(BASE.rstrip("/") + "-evil/k8s/crashloop.md") is None
    assert runbooks.for_url(BASE + "k8s/nope.md") is None
    assert runbooks.for_url(BASE + BROKEN) is None
    assert Runbooks(tmp_path).for_url(BASE + "k8s/crashloop.md") is None  # no base_url


def test_a_base_url_without_a_trailing_slash(tmp_path: Path) -> None:
    runbooks = Runbooks(write_corpus(tmp_path), base_url=BASE.rstrip("/"))
    found = runbooks.for_url(BASE + "k8s/crashloop.md")
    assert found is not None and found.ref == "k8s/crashloop.md"


def test_summary_counts_files_sections_alerts_and_skips(runbooks: Runbooks) -> None:
    summary = runbooks.summary()
    assert summary.files == 29
    assert summary.sections >= 90
    assert list(summary.alerts) == sorted(summary.alerts)
    assert {"KubePodCrashLooping", "HostOutOfDiskSpace", "HostOutOfInodes"} <= set(summary.alerts)
    assert "SomethingBroken" not in summary.alerts
    assert summary.skipped == ((BROKEN, 4, summary.skipped[0][2]),)


def test_a_missing_folder_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="OPSLOOP_RUNBOOKS"):
        Runbooks(tmp_path / "nope")
