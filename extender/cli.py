"""The `dra-extender` command line: one module per subcommand under `extender.commands`."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Each module defines `register(subparsers)`, which adds its subparser and sets `func(args) -> int`.
SUBCOMMAND_MODULES = (
    "extender.commands.check",
    "extender.commands.allocate",
    "extender.commands.serve",
    "extender.commands.explain",
    "extender.commands.headroom",
    "extender.commands.simulate",
    "extender.commands.certs",
    "extender.commands.version",
)


KUBECTL_PLUGIN_PROG = "kubectl dra"


def build_parser(prog: str = "dra-extender") -> argparse.ArgumentParser:
    from extender.commands.output import EXIT_CODES_HELP

    parser = argparse.ArgumentParser(
        prog=prog,
        description="Kubernetes DRA scheduling from outside kube-scheduler.",
        epilog=f"Each command has examples in its --help.\n\n{EXIT_CODES_HELP}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action="store_true",
        help="print the version, CEL backend and event loop, then exit (as the version command)"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def version_text() -> str:
    from extender.commands import version

    return version.text(version.document())


def main(argv: Sequence[str] | None = None, prog: str = "dra-extender") -> int:
    from extender.options import OptionsError
    from extender.wiring import choose_cel_engine

    parser = build_parser(prog)
    args = parser.parse_args(argv)
    try:
        choose_cel_engine()
    except OptionsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.version:
        print(version_text())
        return 0
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    return int(args.func(args))


def kubectl_plugin_main() -> int:
    """`kubectl-dra` on PATH makes `kubectl dra ...` run this (kubectl's plugin convention)."""
    return main(prog=KUBECTL_PLUGIN_PROG)


if __name__ == "__main__":
    sys.exit(main())
