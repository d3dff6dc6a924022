"""What every `dra-extender` command shares about its output: `-o text|json|yaml` (kubectl's flag,
`--format` kept as an alias), the exit codes, `-n` for names given without a namespace, and the log
flags of the commands that log (serve, explain, simulate).

Exit codes, the same for every command (also printed by `dra-extender --help`):
    0  fits / ok
    1  does not fit, or problems found (the output says which)
    2  usage error, or an error that stopped the command (bad input, unreadable cluster, ...)
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import Any

import orjson
import yaml

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_ERROR = 2

EXIT_CODES_HELP = """exit codes (every command):
  0  fits / ok
  1  does not fit, or problems found (the output says which)
  2  usage error, or an error that stopped the command"""

FORMATS = ("text", "json", "yaml")


def add_output_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o", "--output", "--format", dest="output", choices=FORMATS, default="text",
        help="output format (default text; --format is an alias)",
    )


def add_namespace_argument(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "-n", "--namespace", default=None,
        help=f"namespace of a {what} given as NAME alone (default: default)",

    )


def examples(*lines: str) -> str:
    """The `--help` epilog: examples, then the exit codes."""
    return "examples:\n" + "\n".join(f"  {line}" for line in lines) + "\n\n" + EXIT_CODES_HELP


def write(document: Any, output: str, render_text: Callable[[Any], str]) -> None:
    if output == "json":
        sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif output == "yaml":
        sys.stdout.write(yaml.safe_dump(document, sort_keys=False))
    else:
        sys.stdout.write(render_text(document))


def error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_ERROR


def add_logging_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    parser.add_argument("--log-format", default="text", choices=("text", "json"))


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": self.formatTime(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


def configure_logging(level: str, log_format: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
