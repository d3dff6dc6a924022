"""Serving TLS context whose certificate follows the files on disk (cert-manager rotation).

The listening socket keeps one SSLContext for its lifetime; its SNI callback (which OpenSSL runs for every
handshake, with or without a server name) switches each new connection to the newest context. Established
connections keep the context they negotiated with, so a rotation drops nothing. A new pair is loaded into a
fresh context first: a rotation caught half-way (new certificate, old key) fails there and leaves the
serving context untouched until the next poll sees the complete pair.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl

from webhook import metrics

log = logging.getLogger(__name__)

FileSignature = tuple[tuple[int, int, int], ...]


class CertificateLoadError(RuntimeError):
    pass


def build_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as err:
        raise CertificateLoadError(
            f"cannot load TLS certificate {cert_file} with key {key_file}: {err}"
        ) from None
    return context


class ReloadingTLS:
    def __init__(self, cert_file: str, key_file: str, *, poll_interval_s: float = 1.0) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.poll_interval_s = poll_interval_s
        self._signature = self._stat()
        self._current = build_context(cert_file, key_file)
        self.server_context = build_context(cert_file, key_file)
        self.server_context.sni_callback = self._select_context
        self._task: asyncio.Task | None = None

    def _stat(self) -> FileSignature:
        signature = []
        for path in (self.cert_file, self.key_file):
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
            context = build_context(self.cert_file, self.key_file)
        except CertificateLoadError as err:
            metrics.CERT_RELOADS.labels("failed").inc()
            log.warning("keeping the current webhook certificate: %s (retrying when the files change)", err)
            return False
        self._current = context
        metrics.CERT_RELOADS.labels("loaded").inc()
        log.info("webhook serving certificate reloaded from %s", self.cert_file)
        return True

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval_s)
            self.reload_if_changed()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._poll(), name="webhook-cert-reload")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
