"""Shell completion generated from the CLI's parser (release/completion.py): the bash script completes
the subcommands and each one's flags, file names after -f; the zsh script declares them all."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "release"))

import completion  # noqa: E402

BASH = shutil.which("bash")


def _complete(script: Path, words: list[str], cwd: Path) -> list[str]:
    assert BASH is not None
    line = " ".join(words)
    program = (f"source {script}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; "
               f'COMP_LINE="{line}"; COMP_POINT=${{#COMP_LINE}}; _shtab_dra_extender; '
               'printf "%s\\n" "${COMPREPLY[@]}"')
    result = subprocess.run([BASH, "-c", program], capture_output=True, text=True, cwd=cwd, check=True)
    return result.stdout.split()


@pytest.mark.skipif(BASH is None, reason="no bash to run the completion script in")
def test_bash_completes_commands_flags_and_files(tmp_path: Path) -> None:
    [bash, zsh] = completion.write(tmp_path / "out")
    assert bash.name == "dra-extender" and zsh.name == "_dra-extender"
    assert _complete(bash, ["dra-extender", "ex"], tmp_path) == ["explain"]
    assert set(_complete(bash, ["dra-extender", "explain", "--all"], tmp_path)) == {"--all-namespaces"}
    assert "--request-timeout" in _complete(bash, ["dra-extender", "explain", "--req"], tmp_path)
    (tmp_path / "pod.yaml").write_text("kind: Pod\n")
    assert "pod.yaml" in _complete(bash, ["dra-extender", "simulate", "-f", "po"], tmp_path)


def test_zsh_declares_every_command() -> None:
    script = completion.script("zsh")
    assert script.startswith("#compdef dra-extender")
    from extender.cli import SUBCOMMAND_MODULES

    for module in SUBCOMMAND_MODULES:
        assert f"{module.rsplit('.', 1)[1]}:" in script
    assert "--all-namespaces" in script and "--filename" in script
