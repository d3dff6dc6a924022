"""What every `dra-extender` command shares about its output: `-o` (kubectl's flag and forms: text,
json, yaml, jsonpath=TEMPLATE, and wide and name where a command prints a list; `--format` kept as an
alias), the exit codes, `-n`/`-A` for names given without a namespace, and the log flags.

Exit codes, the same for every command (also printed by `dra-extender --help`):
    0  fits / ok
    1  does not fit, or problems found (the output says which)
    2  usage error, or an error that stopped the command (bad input, unreadable cluster, ...)
"""

from __future__ import annotations

import argparse
import datetime
import logging
import sys
from collections.abc import Callable
from typing import Any

import orjson
import yaml

from extender.commands import jsonpath

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_ERROR = 2

EXIT_CODES_HELP = """exit codes (every command):
  0  fits / ok
  1  does not fit, or problems found (the output says which)
  2  usage error, or an error that stopped the command"""

FORMATS = ("text", "json", "yaml")
LIST_FORMATS = ("wide", "name")  # for commands that print a list, as kubectl get
JSONPATH = "jsonpath="


def output_form(forms: tuple[str, ...]) -> Callable[[str], str]:
    """The -o value checker: one of `forms`, or jsonpath=TEMPLATE (checked to parse)."""
    def check(value: str) -> str:
        if value.startswith(JSONPATH):
            try:
                jsonpath.parse(value[len(JSONPATH):])
            except jsonpath.JSONPathError as error:
                raise argparse.ArgumentTypeError(f"jsonpath: {error}") from None
            return value
        if value not in forms:
            raise argparse.ArgumentTypeError(
                f"{value!r} is not one of {', '.join(forms)}, jsonpath=TEMPLATE")
        return value
    return check


def add_output_argument(parser: argparse.ArgumentParser, forms: tuple[str, ...] = FORMATS) -> None:
    listed = ", ".join(forms)
    parser.add_argument(
        "-o", "--output", "--format", dest="output", type=output_form(forms), default="text",
        metavar="FORMAT",
        help=f"output format: {listed}, or jsonpath=TEMPLATE as kubectl takes it, e.g. "
        "jsonpath='{.nodes[*].node}' (default text; --format is an alias)",
    )


CONTEXT_NAMESPACE = "the kubeconfig context's namespace against a cluster, default with --snapshot"


def add_namespace_argument(parser: argparse.ArgumentParser, what: str, *, default: str = CONTEXT_NAMESPACE,
                           all_namespaces: bool = False) -> None:
    parser.add_argument(
        "-n", "--namespace", default=None, metavar="NAMESPACE",
        help=f"namespace of a {what} given as NAME alone (default: {default})",
    )
    if all_namespaces:
        parser.add_argument(
            "-A", "--all-namespaces", action="store_true",
            help=f"list {what}s of every namespace instead of one",
        )


def examples(*lines: str) -> str:
    """The `--help` epilog: examples, then the exit codes."""
    return "examples:\n" + "\n".join(f"  {line}" for line in lines) + "\n\n" + EXIT_CODES_HELP


def write(document: Any, output: str, render_text: Callable[[Any], str], *,
          wide: Callable[[Any], str] | None = None, names: Callable[[Any], list[str]] | None = None) -> None:
    """Print `document` as -o asks: `render_text` for text, `wide` and `names` (kubectl's `-o name`:
    one KIND/NAME a line) for a command that prints a list."""
    if output == "json":
        sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif output == "yaml":
        sys.stdout.write(yaml.safe_dump(document, sort_keys=False))
    elif output.startswith(JSONPATH):
        sys.stdout.write(jsonpath.render(output[len(JSONPATH):], document))
    elif output == "wide" and wide is not None:
        sys.stdout.write(wide(document))
    elif output == "name" and names is not None:
        sys.stdout.write("".join(f"{name}\n" for name in names(document)))
    else:
        sys.stdout.write(render_text(document))


def table(rows: list[tuple[str, ...]]) -> str:
    """Rows as kubectl prints them: columns left-aligned, three spaces apart, the last not padded."""
    if not rows:
        return ""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "".join("   ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)),
                               row[-1]]).rstrip() + "\n" for row in rows)


def error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_ERROR


LOG_LEVELS = ("debug", "info", "warning", "error")


def klog_verbosity(value: str) -> str:
    """`--v N` as kube components take it, mapped onto our levels: 0-3 info, 4 and up debug."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a verbosity number: {value!r}") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {number}")
    return "debug" if number >= 4 else "info"


def add_logging_arguments(parser: argparse.ArgumentParser, *, default_level: str = "info") -> None:
    group = parser.add_argument_group("logging (to stderr)")
    group.add_argument(
        "--log-level", default=default_level, choices=LOG_LEVELS,
        help=f"least severe messages logged (default {default_level})",
    )
    group.add_argument(
        "-v", "--v", dest="log_level", type=klog_verbosity, metavar="N",
        help="verbosity as kube components take it: 0-3 is --log-level info, 4 or more debug",
    )
    group.add_argument(
        "--log-format", default="text", choices=("text", "json"),
        help="text: one line per message, 'TIME LEVEL LOGGER: message key=value ...'; json: one object "
        "per line with ts, level, logger, msg and the same keys (default text)",
    )


# The attributes every LogRecord has; any other one was passed in `extra=` and is a key/value field
# (pod, claim, node, verb, duration, kind, ...).
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def rfc3339(created: float) -> str:
    """A log record's time in RFC 3339 with milliseconds and the local zone's offset."""
    return datetime.datetime.fromtimestamp(created).astimezone().isoformat(timespec="milliseconds")


def log_fields(record: logging.LogRecord) -> dict[str, Any]:
    return {name: value for name, value in vars(record).items() if name not in _RECORD_ATTRIBUTES}


def _logfmt(value: Any) -> str:
    text = f"{value:.6g}" if isinstance(value, float) else str(value)
    if text and not any(c in text for c in ' "=\\') and text.isprintable():
        return text
    return orjson.dumps(text).decode()


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = f"{rfc3339(record.created)} {record.levelname} {record.name}: {record.getMessage()}"
        fields = log_fields(record)
        if fields:
            line += " " + " ".join(f"{name}={_logfmt(value)}" for name, value in fields.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": rfc3339(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **log_fields(record),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def configure_logging(level: str, log_format: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if log_format == "json" else _TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
