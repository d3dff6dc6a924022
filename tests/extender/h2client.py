"""A small HTTP/2 client for the tests, on the h2 state machine: TLS with ALPN h2, as kube-scheduler's
Go client connects; also lets a test write raw bytes or hold back a body."""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events


@dataclass
class Reply:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    reset: int | None = None  # RST_STREAM's error code, when the server reset the stream
    done: asyncio.Event = field(default_factory=asyncio.Event)


class H2Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.conn = h2.connection.H2Connection(config)
        self.replies: dict[int, Reply] = {}
        self.goaway: h2.events.ConnectionTerminated | None = None
        self.closed = asyncio.Event()
        self.settings: dict[int, int] = {}
        self._pump = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def connect(cls, port: int, context: ssl.SSLContext) -> H2Client:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                       server_hostname="localhost")
        assert writer.get_extra_info("ssl_object").selected_alpn_protocol() == "h2"
        client = cls(reader, writer)
        client.conn.initiate_connection()
        client.flush()
        return client

    def flush(self) -> None:
        self.writer.write(self.conn.data_to_send())

    async def _read(self) -> None:
        try:
            while data := await self.reader.read(65536):
                for event in self.conn.receive_data(data):
                    self._event(event)
                self.flush()
        except (ConnectionError, ssl.SSLError, h2.exceptions.ProtocolError):
            pass
        finally:
            self.closed.set()
            for reply in self.replies.values():
                reply.done.set()

    def _event(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.ResponseReceived):
            reply = self.replies[event.stream_id]
            reply.headers = dict(event.headers or [])
            reply.status = int(reply.headers[":status"])
        elif isinstance(event, h2.events.DataReceived):
            self.replies[event.stream_id].body += event.data or b""
            self.conn.acknowledge_received_data(event.flow_controlled_length or 0, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            self.replies[event.stream_id].done.set()
        elif isinstance(event, h2.events.StreamReset):
            reply = self.replies[event.stream_id]
            reply.reset = event.error_code
            reply.done.set()
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            changed = event.changed_settings.items()
            self.settings.update({code: setting.new_value for code, setting in changed})
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.goaway = event

    def start(self, path: str, *, method: str = "POST", content_type: str | None = "application/json",
              length: int | None = None, end: bool = False) -> int:
        """Send a request's headers; returns its stream."""
        stream_id = self.conn.get_next_available_stream_id()
        headers = [(":method", method), (":path", path), (":scheme", "https"), (":authority", "localhost")]
        if content_type is not None:
            headers.append(("content-type", content_type))
        if length is not None:
            headers.append(("content-length", str(length)))
        self.replies[stream_id] = Reply()
        self.conn.send_headers(stream_id, headers, end_stream=end)
        self.flush()
        return stream_id

    async def send(self, stream_id: int, data: bytes, *, end: bool = True) -> None:
        """Send `data` on the stream within flow control (waiting for the server's window updates)."""
        view = memoryview(data)
        while view:
            room = min(self.conn.local_flow_control_window(stream_id), self.conn.max_outbound_frame_size)
            if room <= 0:
                await asyncio.sleep(0.005)
                if self.replies[stream_id].done.is_set():
                    return
                continue
            chunk, view = view[:room], view[room:]
            self.conn.send_data(stream_id, chunk.tobytes(), end_stream=end and not view)
            self.flush()
            await self.writer.drain()
        if end and not data:
            self.conn.end_stream(stream_id)
            self.flush()

    async def reply(self, stream_id: int, timeout: float = 10) -> Reply:
        reply = self.replies[stream_id]
        await asyncio.wait_for(reply.done.wait(), timeout)
        return reply

    async def request(self, path: str, body: bytes, **headers: str | int | None) -> Reply:
        length = headers.pop("length", len(body))
        stream_id = self.start(path, length=length if isinstance(length, int) else None,
                               **headers)  # type: ignore[arg-type]
        await self.send(stream_id, body)
        return await self.reply(stream_id)

    async def close(self) -> None:
        self._pump.cancel()
        self.writer.close()
