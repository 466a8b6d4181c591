"""The coding agent's contract, with real agent programs of our own run by the real runner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ephyra.agent.contract import PROMPT_FILE, run_agent
from ephyra.agent.inputs import Stopped
from ephyra.agent.prompt import build_prompt
from ephyra.agent.tool_output import agent_output
from ephyra.core.events import PatchFailed, PatchRecorded, UsageRecorded
from ephyra.policy.work import AgentPolicy
from ephyra.runner import SandboxRunner
from tests.agent.projects import PYTHON, Project, git, shop_files
from tests.runner.conftest import needs_sandbox

AGENTS = Path(__file__).parent / "agents"
KEY = "sk-ant-api03-" + "Qw7Er8Ty9Ui0Op1As2Df3Gh4Jk5Lz6Xc7Vb8Nm9Qw0Er1Ty2Ui3"
GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
PROTECTED = ["tests/test_cart.py::test_total_of_an_empty_cart"]
EVENT = {"quest": "q-1", "at": "2026-01-01T00:00:00Z"}


@pytest.fixture
def shop(tmp_path) -> Project:
    return Project.make(tmp_path, shop_files())


@pytest.fixture
def prompt():
    return build_prompt(
        "Make total() of an empty cart return 0.",
        {"reproduction": {"node_ids": PROTECTED}},
        [("stack trace", "ZeroDivisionError: division by zero")],
    )


def policy(program: str, *args: str, **changes) -> AgentPolicy:
    command = [PYTHON, str(AGENTS / program), "{prompt_file}", *args]
    return AgentPolicy(command=command, api_key_env="ANTHROPIC_API_KEY", **changes)


def run(shop, agent, prompt, **kwargs):
    workdir = kwargs.pop("workdir", None) or shop.workdir()
    result = run_agent(
        workdir,
        agent,
        prompt,
        base=shop.head,
        protected=PROTECTED,
        environ={"ANTHROPIC_API_KEY": KEY, "DATABASE_URL": "postgres://secret@db/ephyra"},
        **kwargs,
    )
    return workdir, result


def branch_tip(workdir) -> str:
    return git(workdir.worktree, "rev-parse", "refs/heads/ephyra/q-1/r1")


def test_an_agent_that_follows_the_contract_gets_its_diff_committed_on_the_branch(shop, prompt):
    workdir, result = run(shop, policy("fixer.py", "claude", output="claude"), prompt)

    assert result.ok
    assert result.head == branch_tip(workdir) != shop.head
    assert git(workdir.worktree, "rev-parse", f"{result.head}^") == shop.head
    assert result.files == ("shop/cart.py",)
    assert result.diff_lines == 2
    assert "return sum(prices)\n" in (workdir.worktree / "shop" / "cart.py").read_text()
    message = git(workdir.worktree, "log", "-1", "--format=%an%n%B", result.head)
    assert message.startswith("Ephyra\nEphyra: the coding agent's patch for quest q-1")
    assert "Fixed total() for an empty cart." in message
    assert git(workdir.worktree, "status", "--porcelain") == ""
    assert not (workdir.worktree / PROMPT_FILE).exists()
    PatchRecorded(
        id="e-1", **EVENT, head=result.head, base=result.base, evidence=result.to_evidence()
    )


def test_the_prompt_the_agent_read_is_kept_in_the_artifacts(shop, prompt):
    workdir, result = run(shop, policy("fixer.py"), prompt)

    assert (workdir.artifacts / "agent-prompt.md").read_text() == prompt.text
    assert result.artifacts == ("agent-prompt.md", "agent.log", "agent.json", "agent.diff")
    assert result.prompt["sha256"] == f"sha256:{prompt.sha256}"
    assert "+    return sum(prices)" in (workdir.artifacts / "agent.diff").read_text()


@pytest.mark.parametrize(
    ("kind", "tokens", "cost_micros"),
    [("claude", 1300, 12_300), ("codex", 1050, 0), ("aider", 2810, 20_000)],
)
def test_the_usage_the_tool_reports_is_read_from_its_output(
    shop, prompt, kind, tokens, cost_micros
):
    _, result = run(shop, policy("fixer.py", kind, output=kind), prompt)

    assert result.ok
    assert (result.usage.tokens, result.usage.cost_micros) == (tokens, cost_micros)
    assert result.usage.reported
    assert result.usage.seconds > 0
    UsageRecorded(
        id="e-2",
        **EVENT,
        source="agent",
        tokens=result.usage.tokens,
        cost_micros=result.usage.cost_micros,
        runner_seconds=round(result.usage.seconds),
    )


def test_a_plain_agent_is_judged_by_its_exit_status_and_its_diff(shop, prompt):
    _, result = run(shop, policy("fixer.py", "plain"), prompt)

    assert result.ok
    assert not result.usage.reported


def test_an_agent_that_hangs_is_killed_at_its_limit_and_its_edits_undone(shop, prompt):
    workdir, result = run(shop, policy("hangs.py", timeout_seconds=10), prompt)

    assert result.refusal.reason == "agent_timed_out"
    assert "killed at its limit of 10 s" in result.refusal.detail
    assert result.head is None
    assert branch_tip(workdir) == shop.head
    assert git(workdir.worktree, "status", "--porcelain") == ""


def test_an_agent_that_asks_for_input_gets_end_of_file_at_once_and_fails(shop, prompt):
    workdir, result = run(shop, policy("asks.py"), prompt)

    assert result.refusal.reason == "agent_failed"
    assert "the agent exited 1" in result.refusal.detail
    assert "EOFError: EOF when reading a line" in result.refusal.detail
    assert "EOFError" in (workdir.artifacts / "agent.log").read_text()
    assert git(workdir.worktree, "status", "--porcelain") == ""


def test_what_the_contract_returns_holds_no_secret_an_agent_printed(shop, prompt):
    workdir, result = run(shop, policy("leaks.py", output="claude"), prompt)

    returned = json.dumps(result.to_evidence()) + result.summary()
    assert result.ok
    assert KEY not in returned
    assert GITHUB_TOKEN not in returned
    assert "[redacted:github-token]" in result.message
    assert KEY not in git(workdir.worktree, "log", "-1", "--format=%B", result.head)


def test_the_agent_sees_its_one_key_and_no_other_variable_of_the_worker(shop, prompt):
    workdir, _ = run(shop, policy("leaks.py", output="claude"), prompt)

    seen = (workdir.artifacts / "agent.log").read_text()
    (names,) = [line for line in seen.splitlines() if line.startswith("I see:")]
    assert "ANTHROPIC_API_KEY" in names.split()
    assert "DATABASE_URL" not in names


def test_an_agent_whose_key_is_not_set_is_not_run(shop, prompt):
    workdir = shop.workdir()

    result = run_agent(
        workdir, policy("fixer.py"), prompt, base=shop.head, protected=PROTECTED, environ={}
    )

    assert result.refusal.reason == "agent_not_configured"
    assert "ANTHROPIC_API_KEY" in result.refusal.detail
    assert result.runs == ()


def test_a_symbolic_link_out_of_the_worktree_is_refused_and_undone(shop, prompt):
    workdir, result = run(shop, policy("escapes.py", "symlink"), prompt)

    assert result.refusal.reason == "agent_escaped_worktree"
    assert "shop/system is a symbolic link to /etc" in result.refusal.detail
    assert "shop/up is a symbolic link to ../../../../outside" in result.refusal.detail
    assert not (workdir.worktree / "shop" / "system").is_symlink()
    assert "# touched" not in (workdir.worktree / "shop" / "cart.py").read_text()
    assert branch_tip(workdir) == shop.head
    PatchFailed(
        id="e-3",
        **EVENT,
        reason=result.refusal.reason,
        detail=result.refusal.detail,
        files=result.refusal.files,
        evidence=result.to_evidence(),
    )


def test_an_agent_that_repoints_the_worktrees_git_file_is_refused_and_the_file_restored(
    shop, prompt
):
    workdir = shop.workdir()
    before = (workdir.worktree / ".git").read_text()

    _, result = run(shop, policy("escapes.py", "dotgit"), prompt, workdir=workdir)

    assert result.refusal.reason == "agent_escaped_worktree"
    assert ".git" in result.refusal.detail
    assert (workdir.worktree / ".git").read_text() == before
    assert git(workdir.worktree, "status", "--porcelain") == ""


@needs_sandbox
def test_in_the_sandbox_a_write_beside_the_worktree_never_reaches_the_host(shop, prompt):
    # The sandbox's system Python runs the program, which the sandbox sees read-only.
    workdir = shop.workdir(runner=SandboxRunner(read_only_paths=[str(AGENTS)]))
    agent = AgentPolicy(command=["python3", str(AGENTS / "escapes.py"), "{prompt_file}", "outside"])

    _, result = run(shop, agent, prompt, workdir=workdir)

    assert not (workdir.worktree.parent / "escaped.txt").exists()
    assert result.ok  # its edit inside the worktree is its whole diff
    assert result.files == ("shop/cart.py",)


def test_an_agent_that_edits_the_reproductions_test_is_refused(shop, prompt):
    workdir, result = run(shop, policy("rewrites_tests.py"), prompt)

    assert result.refusal.reason == "agent_edited_protected"
    assert result.refusal.files == ("tests/test_cart.py",)
    assert "assert total([]) == 0" in (workdir.worktree / "tests" / "test_cart.py").read_text()


@pytest.mark.parametrize(
    ("kind", "said"),
    [("claude", "permission denied for Edit"), ("codex", "stream disconnected")],
)
def test_an_agent_that_exits_0_but_reports_a_failure_is_refused(shop, prompt, kind, said):
    workdir, result = run(shop, policy("fails_quietly.py", kind, output=kind), prompt)

    assert result.refusal.reason == "agent_failed"
    assert "exited 0 but reported a failure" in result.refusal.detail
    assert said in result.refusal.detail
    assert "# partial edit" not in (workdir.worktree / "shop" / "cart.py").read_text()


def test_a_diff_over_the_policys_size_is_refused(shop, prompt):
    workdir, result = run(shop, policy("rambles.py", max_diff_lines=100), prompt)

    assert result.refusal.reason == "agent_diff_too_large"
    assert "500 changed lines; the policy allows 100" in result.refusal.detail
    assert not (workdir.worktree / "shop" / "generated.py").exists()


def test_a_secret_written_into_the_code_is_refused_without_being_repeated(shop, prompt):
    workdir, result = run(shop, policy("plants_secret.py"), prompt)

    assert result.refusal.reason == "agent_diff_has_secret"
    assert "at shop/cart.py line 12" in result.to_evidence()["refusal"]["detail"]
    assert result.refusal.files == ("shop/cart.py",)
    assert "Z9y8X7w6" not in json.dumps(result.to_evidence())
    assert "Z9y8X7w6" not in (workdir.artifacts / "agent.diff").read_text()


def test_an_agent_that_changes_nothing_has_no_patch_whatever_it_says(shop, prompt):
    _, result = run(shop, policy("idle.py", output="claude"), prompt)

    assert result.refusal.reason == "agent_no_change"
    assert result.message == "All fixed!"


def test_an_agents_own_commits_and_branches_become_one_commit_on_the_quests_branch(shop, prompt):
    workdir, result = run(shop, policy("commits.py"), prompt)

    assert result.ok
    assert git(workdir.worktree, "rev-list", "--count", f"{shop.head}..{result.head}") == "1"
    assert git(workdir.worktree, "symbolic-ref", "HEAD") == "refs/heads/ephyra/q-1/r1"
    assert set(result.files) == {"NOTES.md", "shop/cart.py"}
    assert git(workdir.worktree, "status", "--porcelain") == ""


def test_files_the_agents_test_runs_leave_are_not_its_diff(shop, prompt):
    workdir = shop.workdir()
    (workdir.worktree / "shop" / "__pycache__").mkdir()
    (workdir.worktree / "shop" / "__pycache__" / "cart.cpython-311.pyc").write_bytes(b"\0")

    _, result = run(shop, policy("fixer.py"), prompt, workdir=workdir)

    assert result.files == ("shop/cart.py",)


def test_a_step_asked_to_stop_during_the_agents_run_undoes_its_edits(shop, prompt):
    asked = []

    def should_stop():
        asked.append(True)
        return len(asked) > 2  # once the agent runs

    workdir = shop.workdir(should_stop=should_stop)

    with pytest.raises(Stopped):
        run(shop, policy("hangs.py"), prompt, workdir=workdir)

    assert git(workdir.worktree, "status", "--porcelain") == ""


def test_structured_output_is_read_from_the_last_result_among_other_lines():
    text = "\n".join(
        [
            "warning: something",
            json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": "a"}),
            "{not json}",
            json.dumps({"type": "result", "subtype": "error_max_turns", "is_error": False}),
        ]
    )

    output = agent_output("claude", text)

    assert output.failed
    assert output.error == "error_max_turns"


def test_a_claude_run_without_a_result_object_is_a_failure():
    output = agent_output("claude", "Error: Invalid API key · Please run /login\n")

    assert output.failed
    assert output.error == "it printed no JSON result"


def test_a_codex_run_whose_turn_never_completed_is_a_failure():
    output = agent_output("codex", json.dumps({"type": "turn.started"}))

    assert output.failed
    assert output.error == "no turn completed"
