"""`dra-extender version`: the version, CEL backend and event loop (`--version` prints the same line)."""

from __future__ import annotations

import argparse
from typing import Any

from extender.commands import output


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "version",
        help="print the version, the CEL backend and the event loop",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=output.examples("dra-extender version", "kubectl dra version -o json",
                               "dra-extender version -o jsonpath='{.version}'"),
    )
    output.add_output_argument(parser)
    parser.set_defaults(func=run)


def document() -> dict[str, str]:
    from extender.wiring import build_info

    info = build_info()
    return {"version": info["version"], "celBackend": info["cel_backend"], "eventLoop": info["event_loop"]}


def text(info: dict[str, str]) -> str:
    return (f"dra-extender {info['version']} (CEL backend: {info['celBackend']}, "
            f"event loop: {info['eventLoop']})")


def run(args: argparse.Namespace) -> int:
    output.write(document(), args.output, lambda info: text(info) + "\n")
    return output.EXIT_OK
