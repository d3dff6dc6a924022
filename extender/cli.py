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
    "extender.commands.simulate",
    "extender.commands.certs",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dra-extender",
        description="Kubernetes DRA scheduling from outside kube-scheduler.",
    )
    parser.add_argument(
        "--version", action="store_true", help="print the version, CEL backend and event loop, then exit"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def version_text() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        own = version("dra-extender")
    except PackageNotFoundError:
        own = "unknown"
    from allocator import cel
    from extender import eventloop

    return f"dra-extender {own} (CEL backend: {cel.default_engine().name}, event loop: {eventloop.name()})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        try:
            print(version_text())
        except ValueError as error:  # an unknown $DRA_EXTENDER_CEL_BACKEND
            from allocator.cel import BACKEND_ENV

            print(f"error: {BACKEND_ENV}: {error}", file=sys.stderr)
            return 2
        return 0
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
