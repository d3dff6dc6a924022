"""The device map in a real headless browser (Debian's chromium, driven over the DevTools protocol with
aiohttp's WebSocket client): the page loads without console errors or blocked loads, the example
cluster's devices show with the right states and colours, and the explain link works.

Skips, saying how to get one, where no chromium is installed (`apt-get install -y chromium`)."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from test_devicemap import example_server

from extender.http.server import ExtenderServer

BROWSER = next((found for name in ("chromium", "chromium-browser", "google-chrome")
                if (found := shutil.which(name))), None)
pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no chromium to test the device map in: `apt-get install -y chromium` (Debian)"
)
STEP_TIMEOUT_S = 60


class DevTools:
    """Just enough of the Chrome DevTools protocol: commands by id, events collected as they come."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self.socket = socket
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        call_id = next(self.ids)
        await self.socket.send_json({"id": call_id, "method": method, "params": params})
        while True:
            message = json.loads((await self.socket.receive(timeout=STEP_TIMEOUT_S)).data)
            if message.get("id") == call_id:
                assert "error" not in message, message
                return message.get("result", {})
            self.events.append(message)

    async def wait_for(self, method: str) -> dict[str, Any]:
        seen = len(self.events)
        while True:
            for event in self.events[seen:]:
                if event.get("method") == method:
                    self.events.remove(event)
                    return event
            seen = len(self.events)
            message = json.loads((await self.socket.receive(timeout=STEP_TIMEOUT_S)).data)
            self.events.append(message)

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    async def open(self, url: str) -> None:
        await self.call("Page.navigate", url=url)
        await self.wait_for("Page.loadEventFired")

    def problems(self) -> list[str]:
        """Console errors, uncaught exceptions, failed loads and CSP violations seen so far."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(str(params.get("exceptionDetails")))
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(str(params.get("args")))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                found.append(str(params["entry"]))
            elif method == "Network.loadingFailed":
                found.append(str(params))
        return found


@pytest.fixture
async def server() -> AsyncIterator[ExtenderServer]:
    server = example_server()
    await server.start("127.0.0.1", 0, 0)
    yield server
    await server.stop()


@pytest.fixture
async def devtools(tmp_path: Path) -> AsyncIterator[DevTools]:
    assert BROWSER is not None
    profile = tmp_path / "profile"
    process = subprocess.Popen(
        [BROWSER, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--no-default-browser-check", "--disable-extensions", "--remote-debugging-address=127.0.0.1",
         "--remote-debugging-port=0",
         f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STEP_TIMEOUT_S
        while not (port_file.is_file() and port_file.read_text().strip()):
            assert process.poll() is None, f"{BROWSER} exited with {process.returncode}"
            assert loop.time() < deadline, f"{BROWSER} did not open its DevTools port"
            await asyncio.sleep(0.1)
        port = port_file.read_text().split()[0]
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/json/list") as response:
                targets = await response.json()
            [page] = [target for target in targets if target["type"] == "page"]
            async with session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as socket:
                tools = DevTools(socket)
                for domain in ("Page", "Runtime", "Log", "Network"):
                    await tools.call(f"{domain}.enable")
                yield tools
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def test_device_map_in_a_browser(server: ExtenderServer, devtools: DevTools) -> None:
    debug = server.urls["debug"]
    await devtools.open(f"{debug}/debug/ui")
    assert await devtools.evaluate("document.title") == "DRA Extender: device map"
    devices = await devtools.evaluate(
        "[...document.querySelectorAll('.dev')].map(e => [e.closest('.pool').dataset.pool + '/' + "
        "e.dataset.device, e.dataset.state, getComputedStyle(e).backgroundColor, e.offsetWidth > 0])"
    )
    assert len(devices) == 28
    by_device = {device: (state, colour, visible) for device, state, colour, visible in devices}
    assert by_device["gpu.example.com/node-1/gpu-0"][0] == "allocated"
    assert by_device["gpu.example.com/node-3/gpu-2"][0] == "in flight"
    assert by_device["gpu.example.com/node-2/gpu-3"][0] == "tainted"
    assert by_device["gpu.example.com/node-2/gpu-0"][0] == "free"
    assert all(visible for _, _, visible in by_device.values())
    # The style sheet applied: one colour per state, different states different colours.
    colours: dict[str, set[str]] = {}
    for state, colour, _ in by_device.values():
        colours.setdefault(state, set()).add(colour)
    assert all(len(shades) == 1 for shades in colours.values()), colours
    assert len({next(iter(shades)) for shades in colours.values()}) == 5, colours  # counters used up too

    await devtools.evaluate("document.querySelector('a.explain[href*=\"a100-job\"]').click()")
    await devtools.wait_for("Page.loadEventFired")
    assert (await devtools.evaluate("location.pathname")) == "/debug/explain"
    text = await devtools.evaluate("document.body.innerText")
    assert text.startswith("pod default/a100-job: fits 1 of 3 node(s)"), text[:200]
    assert devtools.problems() == []


async def test_the_headroom_panel_in_a_browser(server: ExtenderServer, devtools: DevTools,
                                               tmp_path: Path) -> None:
    """The panel as a person sees it: asked through its form, its numbers shown, the room of each node
    and the stranded devices outlined, partitions boxed under their counter set; and a screenshot."""
    debug = server.urls["debug"]
    await devtools.open(f"{debug}/debug/ui")
    await devtools.evaluate(
        "document.querySelector('input[name=headroom]').value = 'gpu.example.com';"
        "document.querySelector('input[name=headroom]').form.submit()")
    await devtools.wait_for("Page.loadEventFired")
    assert await devtools.evaluate("location.search") == "?headroom=gpu.example.com"
    panel = await devtools.evaluate(
        "(() => { const t = document.getElementById('headroom'); const r = t.getBoundingClientRect();"
        " return [t.querySelector('td.total').innerText, r.width, r.height,"
        " [...document.querySelectorAll('.room')].map(e => e.innerText)]; })()")
    total, width, height, rooms = panel
    assert total == "16" and width > 200 and height > 20
    assert rooms == ["takes 6 more of 1 x gpu.example.com", "takes 7 more of 1 x gpu.example.com",
                     "takes 3 more of 1 x gpu.example.com"]
    stranded = await devtools.evaluate(
        "[...document.querySelectorAll('.dev.stranded')].map(e => [e.dataset.device, "
        "getComputedStyle(e).outlineStyle, e.title])")
    assert ["gpu-3", "dotted", "tainted; stranded for the headroom shape: taint; taints "
            "example.com/unhealthy=<img src=x onerror=\"alert(1)\">&:NoSchedule"] in stranded
    boxed = await devtools.evaluate(
        "[...document.querySelectorAll('.set')].map(e => [e.dataset.set, e.querySelectorAll('.dev').length,"
        " getComputedStyle(e).borderStyle])")
    assert ["gpu-0-counters", 3, "dashed"] in boxed
    shot = await devtools.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
    png = base64.b64decode(shot["data"])
    (tmp_path / "headroom.png").write_bytes(png)
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    assert devtools.problems() == []
