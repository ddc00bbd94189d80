"""The GitHub workflows: least privilege, actions pinned to commits, time limits, and the order of
trust
(Pages publishes only what CI passed; the weights come from the revision their cache names)."""

import re
from pathlib import Path

import pytest
import yaml

from book.checkpoint import OFFICIAL_REVISIONS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
WORKFLOWS = ROOT / ".github" / "workflows"
FILES = sorted(WORKFLOWS.glob("*.yml"))
# the commit each release tag points to, read from the action's own repository
PINS = {
    "actions/checkout": ("3d3c42e5aac5ba805825da76410c181273ba90b1", "v7.0.1"),
    "actions/setup-python": ("5fda3b95a4ea91299a34e894583c3862153e4b97", "v7.0.0"),
    "actions/cache": ("27d5ce7f107fe9357f9df03efb73ab90386fccae", "v5.0.5"),
    "actions/upload-artifact": ("bbbca2ddaa5d8feaa63e36b76fdaad77386f024f", "v7.0.0"),
    "actions/upload-pages-artifact": ("fc324d3547104276b827a68afc52ff2a11cc49c9", "v5.0.0"),
    "actions/deploy-pages": ("cd2ce8fcbc39b97be8ca5fce6e763baed58fa128", "v5.0.0"),
}
USES = re.compile(r"^\s*(?:-\s+)?uses:\s*(\S+?)@(\S+)\s*(?:#\s*(\S+))?\s*$")


def load(name):
    wf = yaml.safe_load((WORKFLOWS / name).read_text())
    wf["on"] = wf.pop(True, wf.get("on"))  # YAML 1.1 reads the key `on` as True
    return wf


def steps(job):
    return job.get("steps", [])


def test_there_are_the_three_workflows():
    assert [f.name for f in FILES] == ["ci.yml", "official-weights.yml", "pages.yml"]


@pytest.mark.parametrize("file", FILES, ids=lambda f: f.name)
def test_every_action_is_pinned_to_a_commit_with_its_version(file):
    lines = [line for line in file.read_text().splitlines() if re.match(r"^\s*(-\s+)?uses:", line)]
    assert lines
    for line in lines:
        m = USES.match(line)
        assert m and re.fullmatch(r"[0-9a-f]{40}", m[2]) and m[3], (
            f"{file.name}: not pinned: {line.strip()}"
        )
        if m[1] in PINS:
            assert (m[2], m[3]) == PINS[m[1]], (
                f"{file.name}: {m[1]} pinned to another commit than {PINS[m[1]]}"
            )


@pytest.mark.parametrize("file", FILES, ids=lambda f: f.name)
def test_least_privilege_and_time_limits(file):
    wf = load(file.name)
    assert wf["permissions"] in ({}, {"contents": "read"}), "the workflow's default token"
    for name, job in wf["jobs"].items():
        assert isinstance(job.get("timeout-minutes"), int) and 0 < job["timeout-minutes"] <= 120, (
            name
        )
        perms = job.get("permissions")
        assert isinstance(perms, dict), f"{file.name}: job {name} states its permissions"
        writes = {k for k, v in perms.items() if v == "write"}
        allowed = (
            {"pages", "id-token"}
            if any("deploy-pages@" in s.get("uses", "") for s in steps(job))
            else set()
        )
        assert writes <= allowed, f"{file.name}: job {name} may write {writes - allowed}"
        assert set(perms.values()) <= {"read", "write", "none"}
        for step in steps(job):
            if "actions/checkout@" in step.get("uses", ""):
                assert step["with"]["persist-credentials"] is False  # no token left in .git/config


def test_ci_runs_the_readme_command_and_cancels_superseded_runs():
    wf = load("ci.yml")
    assert wf["name"] == "CI" and {"push", "pull_request"} <= set(wf["on"])
    assert wf["concurrency"]["cancel-in-progress"] is True
    assert (
        "github.ref" in wf["concurrency"]["group"]
        and "pull_request.number" in wf["concurrency"]["group"]
    )
    runs = [s.get("run", "") for job in wf["jobs"].values() for s in steps(job)]
    assert "bash .ci/run" in runs


def test_pages_deploys_only_a_commit_whose_ci_passed():
    wf, ci = load("pages.yml"), load("ci.yml")
    assert wf["on"] == {
        "workflow_run": {"workflows": [ci["name"]], "types": ["completed"], "branches": ["main"]}
    }
    build, deploy = wf["jobs"]["build"], wf["jobs"]["deploy"]
    for condition in (
        "github.event.workflow_run.conclusion == 'success'",
        "github.event.workflow_run.event == 'push'",
        "github.event.workflow_run.head_branch == 'main'",
        "github.event.workflow_run.head_repository.full_name == github.repository",
    ):
        assert condition in build["if"]
    [checkout] = [s for s in steps(build) if "actions/checkout@" in s.get("uses", "")]
    assert (
        checkout["with"]["ref"] == "${{ github.event.workflow_run.head_sha }}"
    )  # that commit, not main's tip
    assert deploy["needs"] == "build" and deploy["permissions"] == {
        "pages": "write",
        "id-token": "write",
    }
    assert build["permissions"] == {"contents": "read"}


def test_the_weights_come_from_the_revision_the_cache_key_names():
    wf = load("official-weights.yml")
    revision = wf["env"]["QWEN_REVISION"]
    assert re.fullmatch(r"[0-9a-f]{40}", revision) and revision in OFFICIAL_REVISIONS
    [job] = wf["jobs"].values()
    [cache] = [s for s in steps(job) if "actions/cache@" in s.get("uses", "")]
    assert cache["with"]["path"] == "models/Qwen3.5-0.8B"
    assert cache["with"]["key"].endswith("${{ env.QWEN_REVISION }}")
    [download] = [s for s in steps(job) if "hf download Qwen/Qwen3.5-0.8B" in s.get("run", "")]
    assert (
        '--revision "$QWEN_REVISION"' in download["run"]
        and "--local-dir models/Qwen3.5-0.8B" in download["run"]
    )
    assert any(
        "python -m book.checkpoint --official models/Qwen3.5-0.8B" in s.get("run", "")
        for s in steps(job)
    )
    assert wf["defaults"]["run"]["shell"] == "bash"  # -o pipefail: `| tee` hides no failure


def test_the_regeneration_artifact_is_uploaded_even_when_a_step_fails():
    [job] = load("official-weights.yml")["jobs"].values()
    names = [s.get("uses", s.get("run", "")) for s in steps(job)]
    [upload] = [
        i for i, s in enumerate(steps(job)) if "actions/upload-artifact@" in s.get("uses", "")
    ]
    regen = [i for i, n in enumerate(names) if "book.regen" in n]
    assert regen and upload > max(regen)
    assert steps(job)[upload].get("if") == "always()"
    assert steps(job)[upload]["with"]["path"].split("\n") == ["docs/outputs", "docs/figures"]


def test_ci_runs_the_full_command_that_the_readme_gives():
    """.ci/run ends with the README's test command, and that command is the full tier."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["make serve", "make test-all"]
    ci = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert ci[-1] == "make test-all"
    makefile = (ROOT / "Makefile").read_text()
    assert (
        'pytest -m "not slow and not browser"' in makefile.split("\ntest:", 1)[1].split("\n\n")[0]
    )


def test_readme_counts_the_skipped_code_blocks():
    """The README's number of skipped code blocks per edition is the pages' own count."""
    import re

    said = re.search(r"except (\d+) per edition that are marked as skipped", README.read_text())
    assert said, "the README no longer says how many code blocks are skipped"
    for lang in ("zh", "en"):
        pages = [*(ROOT / "docs" / lang).glob("*.md"), *(ROOT / "docs" / lang).glob("*/*.md")]
        n = sum(p.read_text().count("<!--pytest.mark.skip") for p in pages)
        assert n == int(said.group(1)), f"{lang}: {n} skipped, the README says {said.group(1)}"
