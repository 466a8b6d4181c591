"""Credentials come from git's own helper or from the configured git-credentials file, which
git reads and never writes: a rejected password does not erase the operator's file."""

from __future__ import annotations

import os
import subprocess

from ephyra.landing.remote import credential_options

ASK = "protocol=https\nhost=git.example.com\n\n"


def credential(options: list[str], action: str, given: str, home) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": str(home / "gitconfig"), "GIT_TERMINAL_PROMPT": "0"}
    done = subprocess.run(
        ["git", *options, "credential", action],
        input=given,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    return done.stdout


def test_the_credentials_file_is_the_one_source_and_is_never_written(tmp_path):
    # The worker user's own configuration names another helper: with a file configured, the
    # file alone answers.
    (tmp_path / "gitconfig").write_text('[credential]\n\thelper = "!echo password=other; :"\n')
    secrets = tmp_path / "git-credentials"
    secrets.write_text("https://ann:s3cret@git.example.com\n")
    options = credential_options(secrets)

    answer = credential(options, "fill", ASK, tmp_path)

    assert "username=ann\n" in answer and "password=s3cret\n" in answer
    rejected = ASK.replace("\n\n", "\nusername=ann\npassword=s3cret\n\n")
    credential(options, "reject", rejected, tmp_path)
    credential(options, "approve", rejected.replace("s3cret", "new"), tmp_path)
    assert secrets.read_text() == "https://ann:s3cret@git.example.com\n"


def test_without_a_file_gits_own_helper_answers(tmp_path):
    (tmp_path / "gitconfig").write_text(
        '[credential]\n\thelper = "!f() { echo username=bob; echo password=own; }; f"\n'
    )
    assert credential_options(None) == []
    assert "password=own" in credential([], "fill", ASK, tmp_path)
