"""``ephyra completion bash|zsh``: a completion script made from the parser itself, so it never
lists a command or option the program does not have.

    source <(ephyra completion bash)           # in ~/.bashrc
    ephyra completion zsh > "${fpath[1]}/_ephyra"   # zsh, then restart it
"""

from __future__ import annotations

import argparse

from ephyra.cli.context import Context

FILE_ARGUMENTS = {"file"}  # positional arguments that name a file: completed with file names


def register(commands, common) -> None:
    completion = commands.add_parser(
        "completion", parents=[common], help="print a shell completion script"
    )
    completion.add_argument("shell", choices=["bash", "zsh"], help="the shell")
    completion.set_defaults(run=run_completion)


def run_completion(ctx: Context) -> int:
    table = command_table(ctx.args.root_parser)  # the whole parser the program runs with
    ctx.out.out.write(bash_script(table) if ctx.args.shell == "bash" else zsh_script(table))
    return 0


def command_table(parser: argparse.ArgumentParser, path: str = "", table=None) -> dict:
    """``{"policy check": {"commands": [...], "options": [...], "choices": {...},
    "files": bool}, ...}`` for every command path, the top level being ``""``."""
    table = {} if table is None else table
    entry = {"commands": [], "options": [], "choices": {}, "files": False}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                entry["commands"].append(name)
                command_table(sub, f"{path} {name}".strip(), table)
        elif action.option_strings:
            entry["options"].extend(s for s in action.option_strings if s.startswith("--"))
            if action.choices:
                for option in action.option_strings:
                    entry["choices"][option] = [str(c) for c in action.choices]
        elif action.dest in FILE_ARGUMENTS:
            entry["files"] = True
        elif action.choices:
            entry["commands"].extend(str(c) for c in action.choices)
    table[path] = entry
    return table


def bash_script(table: dict) -> str:
    commands, options, choices, files = [], [], [], []
    for path, entry in sorted(table.items()):
        commands.append(f'        "{path}") echo "{" ".join(entry["commands"])}" ;;')
        options.append(f'        "{path}") echo "{" ".join(entry["options"])}" ;;')
        for option, values in entry["choices"].items():
            choices.append(f'        "{path}|{option}") echo "{" ".join(values)}" ;;')
        if entry["files"]:
            files.append(path)
    return f"""# bash completion for ephyra (ephyra completion bash)
_ephyra_commands() {{
    case "$1" in
{chr(10).join(commands)}
    esac
}}
_ephyra_options() {{
    case "$1" in
{chr(10).join(options)}
    esac
}}
_ephyra_choices() {{
    case "$1" in
{chr(10).join(choices)}
    esac
}}
_ephyra() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="" path="" word i
    [[ $COMP_CWORD -gt 0 ]] && prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${{COMP_WORDS[i]}}"
        [[ "$word" == -* ]] && continue
        if [[ " $(_ephyra_commands "$path") " == *" $word "* ]]; then
            path="${{path:+$path }}$word"
        fi
    done
    local values
    values="$(_ephyra_choices "$path|$prev")"
    if [[ -n "$values" ]]; then
        COMPREPLY=($(compgen -W "$values" -- "$cur"))
    elif [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$(_ephyra_options "$path")" -- "$cur"))
    elif [[ -n "$(_ephyra_commands "$path")" ]]; then
        COMPREPLY=($(compgen -W "$(_ephyra_commands "$path")" -- "$cur"))
    else
        case "$path" in
            {"|".join(f'"{p}"' for p in files) or '""'}) COMPREPLY=($(compgen -f -- "$cur")) ;;
        esac
    fi
}}
complete -o default -F _ephyra ephyra
"""


def zsh_script(table: dict) -> str:
    cases = []
    for path, entry in sorted(table.items()):
        words = " ".join(entry["commands"])
        opts = " ".join(entry["options"])
        cases.append(f'    "{path}") subs=({words}); opts=({opts}); files={int(entry["files"])} ;;')
    choices = []
    for path, entry in sorted(table.items()):
        for option, values in entry["choices"].items():
            choices.append(f'    "{path}|{option}") vals=({" ".join(values)}) ;;')
    return f"""#compdef ephyra
# zsh completion for ephyra (ephyra completion zsh)
_ephyra() {{
  local at="" word i
  local -a subs opts vals
  local files=0
  for ((i = 2; i < CURRENT; i++)); do
    word="${{words[i]}}"
    [[ "$word" == -* ]] && continue
    _ephyra_level "$at"
    if (( ${{subs[(Ie)$word]}} )); then
      at="${{at:+$at }}$word"
    fi
  done
  _ephyra_level "$at"
  vals=()
  case "$at|${{words[CURRENT-1]}}" in
{chr(10).join(choices)}
  esac
  if (( ${{#vals}} )); then
    compadd -a vals
  elif [[ "${{words[CURRENT]}}" == -* ]]; then
    compadd -a opts
  elif (( ${{#subs}} )); then
    compadd -a subs
  elif (( files )); then
    _files
  fi
}}
_ephyra_level() {{
  subs=(); opts=(); files=0
  case "$1" in
{chr(10).join(cases)}
  esac
}}
_ephyra "$@"
"""
