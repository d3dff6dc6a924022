"""Serving TLS whose certificate follows the files on disk (cert-manager rotation), for every port we serve.

The listening socket keeps one SSLContext for its lifetime; its SNI callback (which OpenSSL runs for every
handshake, with or without a server name) switches each new connection to the newest context. Established
connections keep the context they negotiated with, so a rotation drops nothing. A new pair is loaded into a
fresh context first: a rotation caught half-way (new certificate, old key) fails there and leaves the
serving context untouched until the next poll sees the complete pair.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Callable

from common.tasks import cancel_and_wait

log = logging.getLogger(__name__)

FileSignature = tuple[tuple[int, int, int], ...]


class CertificateLoadError(RuntimeError):
    pass


def build_context(cert_file: str, key_file: str, client_ca_file: str | None = None, *,
                  alpn: tuple[str, ...] = ()) -> ssl.SSLContext:
    """A server context; with a client CA, clients must present a certificate it signed. `alpn`: the
    application protocols offered, in our order of preference (none: the client's HTTP/1.1)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if alpn:
        context.set_alpn_protocols(list(alpn))
    # Our clients (kube-scheduler, kube-apiserver's webhook client: Go without a session cache) never
    # resume a session, so TLS 1.3 session tickets are work for nothing in every handshake, and
    # kube-scheduler opens a new connection for most pods (see the extender's connection metric).
    context.num_tickets = 0
    try:
        context.load_cert_chain(cert_file, key_file)
        if client_ca_file:
            context.load_verify_locations(cafile=client_ca_file)
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as err:
        files = f"{cert_file} with key {key_file}"
        if client_ca_file:
            files += f" and client CA {client_ca_file}"
        raise CertificateLoadError(f"cannot load TLS certificate {files}: {err}") from None
    return context


class ReloadingTLS:
    """`server_context` for the listening socket; `start()` polls the files and swaps in changed pairs.

    `on_reload("loaded" | "failed")` lets the owner count reloads in its own metrics.
    """

    def __init__(
        self,
        cert_file: str,
        key_file: str,
        *,
        client_ca_file: str | None = None,
        name: str = "serving",
        poll_interval_s: float = 1.0,
        on_reload: Callable[[str], None] | None = None,
        alpn: tuple[str, ...] = (),
    ) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.client_ca_file = client_ca_file
        self.alpn = alpn
        self.name = name
        self.poll_interval_s = poll_interval_s
        self._on_reload = on_reload
        self._signature = self._stat()
        self._current = self._build()
        self.server_context = self._build()
        self.server_context.sni_callback = self._select_context
        self._task: asyncio.Task[None] | None = None

    def _build(self) -> ssl.SSLContext:
        # Every context gets the ALPN list: the one the SNI callback switches a connection to answers it.
        return build_context(self.cert_file, self.key_file, self.client_ca_file, alpn=self.alpn)

    def _stat(self) -> FileSignature:
        signature = []
        for path in (self.cert_file, self.key_file, self.client_ca_file):
            if path is None:
                continue
            try:
                st = os.stat(path)  # follows the symlinks of Secret volumes, so a swap of ..data shows
            except OSError:
                signature.append((-1, -1, -1))
            else:
                signature.append((st.st_mtime_ns, st.st_size, st.st_ino))
        return tuple(signature)

    def _select_context(self, connection: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> None:
        connection.context = self._current

    def reload_if_changed(self) -> bool:
        """Load the files when they changed since the last attempt; True when a new pair is now served."""
        signature = self._stat()
        if signature == self._signature:
            return False
        self._signature = signature
        try:
            context = self._build()
        except CertificateLoadError as err:
            self._report("failed")
            log.warning("keeping the current %s certificate: %s (retried on change)", self.name, err)
            return False
        self._current = context
        self._report("loaded")
        log.info("%s certificate reloaded from %s", self.name, self.cert_file)
        return True

    def _report(self, outcome: str) -> None:
        if self._on_reload is not None:
            self._on_reload(outcome)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval_s)
            self.reload_if_changed()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._poll(), name=f"{self.name}-cert-reload")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
