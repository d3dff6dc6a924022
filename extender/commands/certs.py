"""`dra-extender certs`: a CA and a webhook serving certificate, or (`--client`) a client certificate
from that CA, for clusters without cert-manager."""

from __future__ import annotations

import argparse
import base64
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from extender.commands import output

if TYPE_CHECKING:
    from webhook.certs import KeyPair

CLIENT_CERT_FILE = "client.crt"
CLIENT_KEY_FILE = "client.key"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "certs",
        help="generate a CA and a serving certificate for the admission webhook, or a client certificate",
        description=(
            "Writes ca.crt, ca.key, tls.crt and tls.key to --out. The certificate is valid for "
            "<service>.<namespace>.svc (and the shorter and longer forms of that name). Prints the base64 "
            "CA bundle to put in the webhook configurations' clientConfig.caBundle.\n\n"
            "With --client: writes client.crt and client.key (a clientAuth certificate named --name, signed "
            "by the CA in --out, which is created first when --out has none) for kube-scheduler's mutual "
            "TLS to the extender (docs/operations.md)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=output.examples(
            "dra-extender certs --service dra-extender-webhook -n dra-extender --out certs/",
            "dra-extender certs --client --name kube-scheduler --out certs/",
            "dra-extender certs --service dra-extender-webhook -n dra-extender --out certs/ -o json",
        ),
    )
    parser.add_argument("--service", metavar="NAME",
                        help="name of the Service in front of the webhook (serving certificate)")
    parser.add_argument("-n", "--namespace", metavar="NAMESPACE", help="namespace of that Service")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR",
                        help="directory to write the PEM files to")
    parser.add_argument(
        "--ip", action="append", default=[], metavar="ADDRESS",
        help="also valid for this IP address (repeatable)"
    )
    parser.add_argument(
        "--client", action="store_true", help="issue a clientAuth certificate instead"
    )
    parser.add_argument("--name", default="kube-scheduler",
                        help="common name of the --client certificate (default kube-scheduler)")
    parser.add_argument("--days", type=int, default=365, metavar="N",
                        help="days the certificates are valid (default 365)")
    parser.add_argument("--force", action="store_true", help="overwrite existing files in --out")
    output.add_output_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Imported here: the CLI builds every command's parser, and `serve` should not load cryptography.
    from webhook import certs

    if args.client:
        if args.service or args.ip:
            return output.error("--client issues a client certificate: --service and --ip do not apply")
        return _client(args)
    if not args.service or not args.namespace:
        return output.error("a serving certificate needs --service and --namespace (or pass --client)")
    out: Path = args.out
    names = (certs.CA_CERT_FILE, certs.CA_KEY_FILE, certs.CERT_FILE, certs.KEY_FILE)
    refused = _refuse_overwrite(out, names, force=args.force)
    if refused:
        return refused
    try:
        ca = certs.generate_ca(f"dra-extender webhook CA ({args.service}.{args.namespace})")
        serving = certs.generate_serving_cert(
            ca, certs.service_dns_names(args.service, args.namespace), args.ip, days=args.days
        )
        certs.write_serving_files(out, ca, serving)
    except (ValueError, OSError) as err:
        return output.error(str(err))
    _report(out, names, ca, args.output)
    return output.EXIT_OK


def _client(args: argparse.Namespace) -> int:
    from webhook import certs

    out: Path = args.out
    names = (CLIENT_CERT_FILE, CLIENT_KEY_FILE)
    refused = _refuse_overwrite(out, names, force=args.force)
    if refused:
        return refused
    written = list(names)
    try:
        if (out / certs.CA_CERT_FILE).exists() or (out / certs.CA_KEY_FILE).exists():
            ca = certs.load_ca(out)
        else:
            ca = certs.generate_ca("dra-extender CA")
            out.mkdir(parents=True, exist_ok=True)
            certs.write_pem(out / certs.CA_CERT_FILE, ca.certificate_pem())
            certs.write_pem(out / certs.CA_KEY_FILE, ca.key_pem(), private=True)
            written = [certs.CA_CERT_FILE, certs.CA_KEY_FILE, *names]
        client = certs.generate_client_cert(ca, args.name, days=args.days)
        certs.write_pem(out / CLIENT_KEY_FILE, client.key_pem(), private=True)
        certs.write_pem(out / CLIENT_CERT_FILE, client.certificate_pem())
    except (ValueError, OSError) as err:
        return output.error(str(err))
    _report(out, written, ca, args.output)
    return output.EXIT_OK


def _refuse_overwrite(out: Path, names: tuple[str, ...], *, force: bool) -> int:
    existing = [name for name in names if (out / name).exists()]
    if existing and not force:
        return output.error(f"{out} already holds {', '.join(existing)}; pass --force to replace them")
    return output.EXIT_OK


def _report(out: Path, names: list[str] | tuple[str, ...], ca: KeyPair, form: str) -> None:
    document = {
        "files": [str(out / name) for name in names],
        "caBundle": base64.b64encode(ca.certificate_pem()).decode("ascii"),
    }
    if form == "text":
        print(f"wrote {', '.join(document['files'])}", file=sys.stderr)
    output.write(document, form, lambda doc: doc["caBundle"] + "\n")
