"""`dra-extender certs`: a CA and a webhook serving certificate, for clusters without cert-manager."""

from __future__ import annotations

import argparse
import base64
import sys
from pathlib import Path
from typing import Any

from webhook import certs


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "certs",
        help="generate a CA and a serving certificate for the admission webhook",
        description=(
            "Writes ca.crt, ca.key, tls.crt and tls.key to --out. The certificate is valid for "
            "<service>.<namespace>.svc (and the shorter and longer forms of that name). Prints the base64 "
            "CA bundle to put in the webhook configurations' clientConfig.caBundle."
        ),
    )
    parser.add_argument("--service", required=True, help="name of the Service in front of the webhook")
    parser.add_argument("--namespace", required=True, help="namespace of that Service")
    parser.add_argument("--out", required=True, type=Path, help="directory to write the PEM files to")
    parser.add_argument(
        "--ip", action="append", default=[], help="also valid for this IP address (repeatable)"
    )
    parser.add_argument("--days", type=int, default=365, help="serving certificate validity (default 365)")
    parser.add_argument("--force", action="store_true", help="overwrite existing files in --out")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    out: Path = args.out
    names = (certs.CA_CERT_FILE, certs.CA_KEY_FILE, certs.CERT_FILE, certs.KEY_FILE)
    existing = [name for name in names if (out / name).exists()]
    if existing and not args.force:
        held = ", ".join(existing)
        print(f"error: {out} already holds {held}; pass --force to replace them", file=sys.stderr)
        return 1
    try:
        ca = certs.generate_ca(f"dra-extender webhook CA ({args.service}.{args.namespace})")
        serving = certs.generate_serving_cert(
            ca, certs.service_dns_names(args.service, args.namespace), args.ip, days=args.days
        )
        certs.write_serving_files(out, ca, serving)
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"wrote {', '.join(str(out / name) for name in names)}", file=sys.stderr)
    print(base64.b64encode(ca.certificate_pem()).decode("ascii"))
    return 0
