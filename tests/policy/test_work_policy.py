"""The policy's work and agent sections: commands as words, Ephyra's own settings never passed,
errors with their line."""

from __future__ import annotations

import pytest

from ephyra.policy import PolicyError, default_policy, parse_policy


def test_commands_are_words_whether_written_as_a_list_or_a_string():
    policy = parse_policy(
        "version: 1\n"
        "work:\n"
        "  setup:\n"
        "    - python3 -m venv .venv\n"
        "    - [.venv/bin/pip, install, -e, '.']\n"
        "  test: .venv/bin/python -m pytest -q 'tests/a b.py'\n"
        "  runner: sandbox\n"
        "  env: [LANG, PYTHONHASHSEED]\n"
    )
    assert policy.work.setup == (
        [["python3", "-m", "venv", ".venv"], [".venv/bin/pip", "install", "-e", "."]]
    )
    assert policy.work.test == [".venv/bin/python", "-m", "pytest", "-q", "tests/a b.py"]
    assert policy.work.runner == "sandbox"
    assert policy.agent is None


def test_the_default_policy_works_locally_with_no_commands_and_no_agent():
    policy = default_policy()
    assert (policy.work.runner, policy.work.test, policy.agent) == ("local", None, None)
    assert "pyproject.toml" in policy.work.setup_files


def test_ephyras_own_settings_are_refused_with_their_line():
    text = "version: 1\nwork:\n  runner: docker\n  env: [LANG, DATABASE_URL, EPHYRA_DATA_DIR]\n"
    with pytest.raises(PolicyError) as raised:
        parse_policy(text, "p.yaml")
    problems = {(path, line) for path, line, _ in raised.value.problems}
    assert problems == {("work.runner", 3), ("work.env", 4)}
    assert "DATABASE_URL, EPHYRA_DATA_DIR: Ephyra's own settings are never passed" in str(
        raised.value
    )


def test_an_agent_needs_a_command_and_may_see_one_key():
    policy = parse_policy(
        "version: 1\nagent:\n  command: claude -p --output-format json\n"
        "  output: claude\n  api_key_env: ANTHROPIC_API_KEY\n"
    )
    assert policy.agent.command == ["claude", "-p", "--output-format", "json"]
    with pytest.raises(PolicyError, match=r"agent\.command: Field required"):
        parse_policy("version: 1\nagent:\n  output: plain\n")
    with pytest.raises(PolicyError, match="cannot split the command into words"):
        parse_policy("version: 1\nwork:\n  test: 'pytest \"unclosed'\n")
