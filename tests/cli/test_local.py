"""The commands that need no server: the policy check, the replay, shell completion; and what
the command line says when there is no server to talk to."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_POLICY = ROOT / "ephyra" / "policy" / "default.yaml"
EXAMPLES = ROOT / "docs" / "examples"
BAD_POLICY = """version: 1
checkpoints:
  A: {mode: blocking}
  B: {mode: nope}
  C: {mode: blocking}
proof:
  attempts: 0
"""


def test_a_valid_policy_passes_the_local_check_with_its_digest(ephyra):
    ran = ephyra("policy", "check", str(DEFAULT_POLICY))
    assert ran.code == 0, ran.err
    assert ran.out.startswith(f"{DEFAULT_POLICY}: a valid policy (sha256:")


def test_an_invalid_policy_fails_the_local_check_with_exit_two_and_each_line(ephyra, tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text(BAD_POLICY)
    ran = ephyra("policy", "check", str(path))
    assert ran.code == 2
    assert ran.out == ""
    assert f"{path}:4: checkpoints.B.mode: Input should be 'blocking', 'advisory' or 'shadow'" in (
        ran.err
    )
    assert f"{path}:7: proof.attempts: Input should be greater than or equal to 1" in ran.err


def test_the_policy_check_reports_problems_as_json_for_scripts(ephyra, tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text(BAD_POLICY)
    ran = ephyra("policy", "check", str(path), "--json")
    assert ran.code == 2
    report = json.loads(ran.out)
    assert report["ok"] is False
    assert {"line": 4, "path": "checkpoints.B.mode"}.items() <= report["problems"][0].items()


def test_the_policy_check_reads_stdin_and_names_an_unreadable_file(ephyra, tmp_path):
    ran = ephyra("policy", "check", "-", stdin="version: 1\ncheckpoints: [\n")
    assert ran.code == 2
    assert "<stdin>:" in ran.err and "not valid YAML" in ran.err
    missing = ephyra("policy", "check", str(tmp_path / "nope.yaml"))
    assert missing.code == 2
    assert f"{tmp_path / 'nope.yaml'}: cannot read: No such file or directory" in missing.err


def test_replay_prints_one_decision_per_event_locally(ephyra):
    ran = ephyra("replay", str(EXAMPLES / "main-line.jsonl"))
    assert ran.code == 0, ran.err
    lines = [json.loads(line) for line in ran.out.splitlines()]
    assert len(lines) == 16
    assert lines[-1]["state"] == "closed"


def test_replay_exits_one_naming_the_event_the_machine_refuses(ephyra):
    ran = ephyra("replay", str(EXAMPLES / "invalid-transition.jsonl"))
    assert ran.code == 1
    assert "invalid transition: event e005 (checkpoint_decided)" in ran.err


def test_replay_exits_two_on_an_unreadable_file(ephyra, tmp_path):
    ran = ephyra("replay", str(tmp_path / "none.jsonl"))
    assert ran.code == 2
    assert "cannot read" in ran.err


def complete(script: str, *words: str) -> list[str]:
    """What bash offers after ``words`` (the last being the word under the cursor)."""
    program = (
        f"{script}\n"
        f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
        '_ephyra; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        ["bash", "--norc", "-c", program], capture_output=True, text=True, check=True
    )
    return done.stdout.split()


def test_bash_completion_offers_commands_subcommands_options_and_choices(ephyra):
    ran = ephyra("completion", "bash")
    assert ran.code == 0
    assert "complete -o default -F _ephyra ephyra" in ran.out
    assert complete(ran.out, "ephyra", "mis") == ["missions"]
    assert complete(ran.out, "ephyra", "policy", "") == [
        "check", "propose", "show", "versions", "approve", "reject", "withdraw",
    ]  # fmt: skip
    assert complete(ran.out, "ephyra", "ledger", "resolve", "k1", "--verdict", "") == [
        "done", "absent", "dead",
    ]  # fmt: skip
    assert complete(ran.out, "ephyra", "missions", "move", "m1", "--ro") == ["--role"]
    assert complete(ran.out, "ephyra", "--json", "quests", "--mi") == ["--mine"]


def test_bash_completion_completes_file_names_for_a_file_argument(ephyra, tmp_path):
    (tmp_path / "mine.yaml").write_text("version: 1\n")
    script = ephyra("completion", "bash").out
    assert complete(script, "ephyra", "policy", "check", f"{tmp_path}/mi") == [
        f"{tmp_path}/mine.yaml"
    ]


def test_zsh_completion_is_a_compdef_function_listing_the_same_commands(ephyra):
    ran = ephyra("completion", "zsh")
    assert ran.code == 0
    assert ran.out.startswith("#compdef ephyra\n")
    assert '"missions move|--role") vals=(lead maker debugger checker human higher)' in ran.out
    assert '"policy") subs=(check propose show versions approve reject withdraw)' in ran.out


def test_a_server_command_without_a_server_configured_is_a_usage_error(ephyra):
    ran = ephyra("quests")
    assert ran.code == 2
    assert "no server: run `ephyra login`, or set EPHYRA_URL and EPHYRA_TOKEN" in ran.err


def test_nothing_listening_on_the_port_exits_four(ephyra, free_port):
    url = f"http://127.0.0.1:{free_port}"
    ran = ephyra("quests", env={"EPHYRA_URL": url, "EPHYRA_TOKEN": "eph_x"})
    assert ran.code == 4
    assert ran.err.startswith(f"error: cannot reach {url}: ")
    assert "Connection refused" in ran.err


def test_a_login_to_nothing_listening_exits_four_and_saves_nothing(ephyra, free_port, cli_env):
    ran = ephyra("login", "--url", f"http://127.0.0.1:{free_port}", "--token", "eph_x")
    assert ran.code == 4
    assert not (Path(cli_env["XDG_CONFIG_HOME"]) / "ephyra" / "config.json").exists()


def test_logout_without_a_saved_token_says_so(ephyra):
    ran = ephyra("logout")
    assert (ran.code, ran.out) == (0, "Not logged in: there was no saved token\n")


def test_logout_removes_the_saved_token(ephyra, cli_env):
    path = Path(cli_env["XDG_CONFIG_HOME"]) / "ephyra" / "config.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"url": "http://x", "token": "eph_secret"}')
    path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    ran = ephyra("logout")
    assert (ran.code, ran.out) == (0, f"Logged out: removed {path}\n")
    assert not path.exists()


def test_a_usage_mistake_exits_two(ephyra):
    ran = ephyra("ledger", "resolve", "k1", "--verdict", "maybe", "-m", "x")
    assert ran.code == 2
    assert "invalid choice: 'maybe'" in ran.err


def test_the_command_line_loads_no_django_and_no_app(cli_env):
    """It must run where only the package is installed: import every command module and look."""
    from tests.cli.conftest import SCRIPT

    python = SCRIPT.parent / "python"
    program = (
        "import sys, ephyra.cli\n"
        "from ephyra.cli import app\n"
        "app.build_parser()\n"
        "apps = ('django', 'rest_framework', 'quests', 'ledger', 'journal', 'missions', 'api')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in apps))\n"
    )
    done = subprocess.run(
        [str(python), "-c", program], capture_output=True, text=True, env=cli_env, check=True
    )
    assert done.stdout == "[]\n"
