"""Shell completion for `dra-extender` (and `kubectl-dra`), generated from the CLI's own parser at build
time with shtab: bash and zsh scripts written to a directory, for a package or an image to install.

shtab is needed only here, to build: it reads the argparse parser and writes plain shell scripts, so
the installed program imports nothing for completion and the scripts never drift from the flags.

    python release/completion.py DIR     # writes DIR/bash/dra-extender and DIR/zsh/_dra-extender
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from extender.cli import build_parser

PROGRAM = "dra-extender"
# Where each shell looks for them once installed (bash-completion's and zsh's site-functions layout).
TARGETS = {"bash": Path("bash") / PROGRAM, "zsh": Path("zsh") / f"_{PROGRAM}"}


def script(shell: str) -> str:
    """The completion script for `shell` (bash or zsh); paths complete where a flag takes a FILE or DIR."""
    import argparse

    import shtab

    parser = build_parser(PROGRAM)
    subparsers = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    commands = [parser, *(choice for action in subparsers for choice in action.choices.values())]
    for command in commands:
        for action in command._actions:
            if action.metavar in ("FILE", "DIR"):
                action.complete = shtab.FILE
    text: str = shtab.complete(parser, shell=shell)
    return text


def write(directory: Path) -> list[Path]:
    written = []
    for shell, relative in TARGETS.items():
        target = directory / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(script(shell))
        written.append(target)
    return written


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    for path in write(Path(argv[0])):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
