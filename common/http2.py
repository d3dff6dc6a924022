"""HTTP/2 for the extender's verbs port, on the `h2` state machine, inside our own event loop.

kube-scheduler's extender client offers HTTP/2 by ALPN over TLS (client-go's TLS config passed
through apimachinery's SetTransportDefaults), and then sends every call on one multiplexed
connection. Over HTTP/1.1 its transport keeps only 2 idle connections per host, so it opens a new
TLS connection for most pods, and each costs us a full (often mutual) TLS handshake. aiohttp does not
serve HTTP/2; this module does, for the verbs only (POST with a JSON body, a complete answer), with
the limits of common.httpguard applied the HTTP/2 way:

- the body size limit: an announced Content-Length over it gets 413 at once; a body growing past it
  gets 413 and the stream is reset;
- bodies over LARGE_BODY_BYTES (or of unknown length) need one of the shared large-body slots before
  more of them is acknowledged: until then flow control holds the sender, as TCP does on HTTP/1.1;
- a body must arrive within `body_timeout_s` (408), including the wait for a slot (503 past it);
- open streams across all connections are bounded by `max_connections` (one request per connection
  is what HTTP/1.1 allows, so the memory bound stays the same): more are refused with
  REFUSED_STREAM, which HTTP/2 clients retry;
- a connection without open streams for `idle_timeout_s` gets GOAWAY and is closed;
- a protocol violation (malformed frames, bad headers, flow-control abuse) closes the connection
  with GOAWAY naming the error; it never reaches a handler.

A stream's answer is written as one HEADERS frame and DATA frames within the peer's flow-control
window: at once for the paths given as `answer_at_once`, otherwise at the end of the loop's turn,
together with the other answers finished in it. Requests are handed to `dispatch` only once complete,
as the HTTP/1.1 path does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection, Coroutine
from dataclasses import dataclass, field
from typing import Any, cast

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from h2.errors import ErrorCodes

from common.httpguard import LARGE_BODY_BYTES, BodyReader, HttpLimits, RequestRefused, check_body_headers

log = logging.getLogger(__name__)

ALPN_H2 = "h2"
# Per-stream receive window: a normal kube-scheduler request (a Pod and node names) arrives without
# waiting for a WINDOW_UPDATE.
STREAM_WINDOW = LARGE_BODY_BYTES
MAX_HEADER_LIST_BYTES = 64 * 1024
# What we receive is validated (a malformed request never reaches a handler); what we send is
# built here from a fixed set of well-formed headers, so checking it again for every answer is skipped.
_CONFIG = h2.config.H2Configuration(client_side=False, header_encoding=None, validate_outbound_headers=False,
                                    normalize_outbound_headers=False)


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: bytes
    close: bool = False  # then GOAWAY: the client sends its next requests on a new connection


@dataclass
class Request:
    method: str
    path: str
    content_type: str
    body: bytes


Verb = Callable[["Request"], Awaitable["Answer"]]
# What a request with (method, path) gets: its verb, or at once an Answer (404, 405).
Router = Callable[[str, str], "Verb | Answer"]


def text_answer(status: int, message: str) -> Answer:
    return Answer(status, "text/plain; charset=utf-8", f"{message}\n".encode())


@dataclass
class _Stream:
    method: str
    path: str
    content_type: str
    length: int | None
    limit: int
    chunks: list[bytes] = field(default_factory=list)
    size: int = 0
    unacked: int = 0
    needs_slot: bool = False
    has_slot: bool = False
    answered: bool = False
    waiters: list[asyncio.Handle | asyncio.Task[None]] = field(default_factory=list)
    outbound: memoryview | None = None


class StreamBudget:
    """The open-stream budget shared by every HTTP/2 connection of one listener."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0


class H2Protocol(asyncio.Protocol):
    """One HTTP/2 connection, already past TLS with `h2` negotiated."""

    def __init__(self, route: Router, limits: HttpLimits, bodies: BodyReader, budget: StreamBudget,
                 *, on_close: Callable[[H2Protocol], None] | None = None,
                 answer_at_once: Collection[str] = ()) -> None:
        self._route = route
        # Paths whose answers are written the moment they are ready; the others' wait for the rest of
        # the loop's turn, to share one TLS record and one write with answers finished in that turn.
        self._answer_at_once = frozenset(answer_at_once)
        self._limits = limits
        self._bodies = bodies
        self._budget = budget
        self._on_close = on_close
        self._conn = h2.connection.H2Connection(config=_CONFIG)
        self._streams: dict[int, _Stream] = {}
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._idle: asyncio.TimerHandle | None = None
        self._last_active = 0.0
        self._tasks: set[asyncio.Task[None]] = set()
        self._waits: set[asyncio.Task[None]] = set()
        self._flush_pending = False
        self._going_away = False

    # ---- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport subclasses
        self._conn.local_settings = h2.settings.Settings(client=False, initial_values={
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self._budget.limit,
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST_BYTES,
            h2.settings.SettingCodes.ENABLE_PUSH: 0,
        })
        self._conn.initiate_connection()
        # The connection window starts at 64 KiB whatever the settings say: open it to a few streams'.
        self._conn.increment_flow_control_window(4 * STREAM_WINDOW)
        self._flush()
        self._touch()

    def data_received(self, data: bytes) -> None:
        try:
            events = self._conn.receive_data(data)
        except h2.exceptions.ProtocolError as error:
            self._abort(error)
            return
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                self._request(event)
            elif isinstance(event, h2.events.DataReceived):
                self._data(event)
            elif isinstance(event, h2.events.StreamEnded):
                self._ended(event.stream_id)
            elif isinstance(event, h2.events.StreamReset):
                self._forget(event.stream_id)
            elif isinstance(event, h2.events.WindowUpdated):
                self._window_opened(event.stream_id)
            elif isinstance(event, h2.events.ConnectionTerminated):
                self._close()
                return
        self._flush()

    def eof_received(self) -> bool | None:
        return None  # close the transport: HTTP/2 has no half-closed connection

    def connection_lost(self, exc: Exception | None) -> None:
        for stream_id in list(self._streams):
            self._forget(stream_id)
        # Waits for a large-body slot end with the connection; verbs being served do not: like aiohttp's
        # HTTP/1.1 handlers, a bind whose caller went away still finishes its writes (its answer is lost).
        for task in list(self._waits):
            task.cancel()
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        self._transport = None
        if self._on_close is not None:
            self._on_close(self)

    # ---- requests ----------------------------------------------------------------------------

    def _request(self, event: h2.events.RequestReceived) -> None:
        stream_id = event.stream_id
        method = path = content_type = ""
        length: int | None = None
        for name, value in event.headers or ():
            if name == b":method":
                method = value.decode("latin-1")
            elif name == b":path":
                path = value.decode("latin-1").split("?", 1)[0]
            elif name == b"content-type":
                content_type = value.decode("latin-1").split(";", 1)[0].strip().lower()
            elif name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    length = -1
        if self._going_away or self._budget.open >= self._budget.limit:
            self._conn.reset_stream(stream_id, ErrorCodes.REFUSED_STREAM)
            return
        stream = _Stream(method, path, content_type or "application/octet-stream", length,
                         self._bodies.limits.body_limit(path))
        self._streams[stream_id] = stream
        self._budget.open += 1
        if length is not None and length < 0:
            self._answer(stream_id, text_answer(400, "Content-Length is not a number"))
            return
        target = self._route(method, path)
        if isinstance(target, Answer):
            self._answer(stream_id, target)
            return
        if method == "POST":
            try:
                check_body_headers(self._bodies.limits, path, stream.content_type, length)
            except RequestRefused as refused:
                self._answer(stream_id, text_answer(refused.status, str(refused)))
                return
        if event.stream_ended is not None:
            return  # StreamEnded follows in the same batch
        stream.needs_slot = length is None or length > LARGE_BODY_BYTES
        deadline = self._loop.time() + self._limits.body_timeout_s
        stream.waiters.append(self._loop.call_at(deadline, self._too_slow, stream_id))
        if stream.needs_slot:
            wait = self._start(self._slot(stream_id, stream, deadline))
            self._waits.add(wait)
            wait.add_done_callback(self._waits.discard)

    def _data(self, event: h2.events.DataReceived) -> None:
        stream_id = event.stream_id
        counted = event.flow_controlled_length or 0
        stream = self._streams.get(stream_id)
        if stream is None or stream.answered:
            # Answered early (or refused): the data still counts against the connection's window.
            self._conn.acknowledge_received_data(counted, stream_id)
            return
        data = event.data or b""
        stream.size += len(data)
        if stream.size > stream.limit:
            message = f"request body is over the limit of {stream.limit} bytes for {stream.path}"
            self._answer(stream_id, text_answer(413, message))
            self._conn.acknowledge_received_data(counted, stream_id)
            return
        stream.chunks.append(data)
        if stream.needs_slot and not stream.has_slot:
            stream.unacked += counted
            return
        self._conn.acknowledge_received_data(counted, stream_id)

    def _ended(self, stream_id: int) -> None:
        stream = self._streams.get(stream_id)
        if stream is None or stream.answered:
            return
        self._release(stream)
        target = self._route(stream.method, stream.path)
        if isinstance(target, Answer):  # answered at the headers already; kept for the type checker
            self._answer(stream_id, target)
            return
        body = stream.chunks[0] if len(stream.chunks) == 1 else b"".join(stream.chunks)
        stream.chunks = []
        request = Request(stream.method, stream.path, stream.content_type, body)
        self._start(self._serve(stream_id, target, request))

    async def _serve(self, stream_id: int, verb: Verb, request: Request) -> None:
        try:
            answer = await verb(request)
        except Exception as error:  # a bug in the verb: answer it as HTTP/1.1's server would, keep serving
            log.error("%s %s failed", request.method, request.path, exc_info=error)
            answer = text_answer(500, f"internal error: {type(error).__name__}")
        if stream_id in self._streams:
            self._answer(stream_id, answer)
            if request.path in self._answer_at_once:
                self._flush()
            else:
                self._flush_soon()

    async def _slot(self, stream_id: int, stream: _Stream, deadline: float) -> None:
        try:
            async with asyncio.timeout_at(deadline):
                await self._bodies.acquire_large()
        except TimeoutError:
            if stream_id in self._streams and not stream.answered:
                self._answer(stream_id, text_answer(503, self._bodies.busy_message()))
                self._flush_soon()
            return
        if stream_id not in self._streams or stream.answered:
            self._bodies.release_large()
            return
        stream.has_slot = True
        if stream.unacked:
            self._conn.acknowledge_received_data(stream.unacked, stream_id)
            stream.unacked = 0
            self._flush_soon()

    def _too_slow(self, stream_id: int) -> None:
        stream = self._streams.get(stream_id)
        if stream is not None and not stream.answered:
            self._answer(stream_id, text_answer(408, f"request body not received within "
                                                     f"{self._limits.body_timeout_s:g} s"))
            self._flush_soon()

    def _start(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = self._loop.create_task(coroutine)
        self._tasks.add(task)  # a reference until it is done
        task.add_done_callback(self._tasks.discard)
        return task

    # ---- answers -----------------------------------------------------------------------------

    def _answer(self, stream_id: int, answer: Answer) -> None:
        stream = self._streams.get(stream_id)
        if stream is None or stream.answered:
            return
        stream.answered = True
        self._release(stream)
        self._going_away |= answer.close
        headers = [(b":status", str(answer.status).encode()),
                   (b"content-type", answer.content_type.encode()),
                   (b"content-length", str(len(answer.body)).encode())]
        try:
            self._conn.send_headers(stream_id, headers, end_stream=not answer.body)
        except h2.exceptions.StreamClosedError:
            self._forget(stream_id)
            return
        if answer.body:
            stream.outbound = memoryview(answer.body)
            self._send_body(stream_id, stream)
        else:
            self._finished(stream_id)

    def _send_body(self, stream_id: int, stream: _Stream) -> None:
        outbound = stream.outbound
        assert outbound is not None
        try:
            while outbound:
                window = self._conn.local_flow_control_window(stream_id)
                room = min(window, self._conn.max_outbound_frame_size)
                if room <= 0:
                    stream.outbound = outbound
                    return  # WindowUpdated resumes
                chunk, outbound = outbound[:room], outbound[room:]
                self._conn.send_data(stream_id, chunk.tobytes(), end_stream=not outbound)
        except h2.exceptions.StreamClosedError:
            self._forget(stream_id)
            return
        stream.outbound = None
        self._finished(stream_id)

    def _finished(self, stream_id: int) -> None:
        if stream_id not in self._streams:
            return
        # Answered before the whole request came (a refusal): the rest is not wanted.
        if self._conn.streams.get(stream_id) is not None and not self._conn.streams[stream_id].closed:
            with contextlib.suppress(h2.exceptions.ProtocolError):
                self._conn.reset_stream(stream_id, ErrorCodes.NO_ERROR)
        self._forget(stream_id)

    def _window_opened(self, stream_id: int) -> None:
        waiting = [stream_id] if stream_id else list(self._streams)
        for sid in waiting:
            stream = self._streams.get(sid)
            if stream is not None and stream.outbound is not None:
                self._send_body(sid, stream)

    # ---- bookkeeping -------------------------------------------------------------------------

    def _release(self, stream: _Stream) -> None:
        for waiter in stream.waiters:
            waiter.cancel()
        stream.waiters.clear()
        if stream.has_slot:
            stream.has_slot = False
            self._bodies.release_large()

    def _forget(self, stream_id: int) -> None:
        stream = self._streams.pop(stream_id, None)
        if stream is None:
            return
        self._release(stream)
        self._budget.open -= 1
        if not self._streams:
            if self._going_away:
                self.shutdown()  # its streams all answered: GOAWAY names the last, then close
            self._touch()

    def _touch(self) -> None:
        self._last_active = self._loop.time()
        if self._idle is None:
            self._idle = self._loop.call_at(self._last_active + self._limits.idle_timeout_s, self._idle_check)

    def _idle_check(self) -> None:
        self._idle = None
        if self._transport is None:
            return
        if self._streams:
            return  # _forget re-arms when the last one goes
        due = self._last_active + self._limits.idle_timeout_s
        if self._loop.time() < due:
            self._idle = self._loop.call_at(due, self._idle_check)
            return
        self._conn.close_connection(ErrorCodes.NO_ERROR)
        self._flush()
        self._close()

    def shutdown(self) -> None:
        """GOAWAY and close (the server is stopping, or this replica may not answer verbs)."""
        if self._transport is None:
            return
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self._conn.close_connection(ErrorCodes.NO_ERROR)
        self._flush()
        self._close()

    def _abort(self, error: Exception) -> None:
        code = ErrorCodes.FLOW_CONTROL_ERROR if isinstance(error, h2.exceptions.FlowControlError) \
            else ErrorCodes.PROTOCOL_ERROR
        log.debug("closing an HTTP/2 connection: %s", error)
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self._conn.close_connection(code, additional_data=str(error).encode()[:200])
        self._flush()
        self._close()

    def _flush(self) -> None:
        self._flush_pending = False
        data = self._conn.data_to_send()
        if data and self._transport is not None:
            self._transport.write(data)

    def _flush_soon(self) -> None:
        """Flush once the answers finished in this turn of the loop are all framed: one TLS record and
        one write for them together, not one each."""
        if not self._flush_pending:
            self._flush_pending = True
            self._loop.call_soon(self._flush)

    def _close(self) -> None:
        if self._transport is not None:
            self._transport.close()
