"""The page's server: the standard library's http.server, on 127.0.0.1 only.

    /                        the page (static/index.html; its script and style: /static/...)
    /api/recording           the list: entries, and per schedule its kernels and groups
    /api/stage?shot=&stage=  one stage of one schedule: its text and the table of its nodes
    /api/svg?shot=&stage=    its picture, drawn by Graphviz (needle.ir.draw) once, then kept
                             (&full=1: every node, where the picture has one box per kernel)
    /api/code?shot=&kernel=  a kernel's LLVM IR or CUDA C

Nothing is fetched from elsewhere: the page works offline.
"""
from __future__ import annotations

import errno
import json
import os
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from ..errors import NeedleError
from ..ir import draw

HOST = "127.0.0.1"
STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".png": "image/png", ".svg": "image/svg+xml"}


class Server:
    """The page of `recording` on http://127.0.0.1:`port`/ (0: any free port).  The
    port is taken when the Server is made: a port in use is a NeedleError then."""

    def __init__(self, recording=None, port: int = 8765):
        if not 0 <= int(port) <= 65535:
            raise NeedleError(f"port must be between 0 and 65535, got {port}")
        try:
            self.httpd = ThreadingHTTPServer((HOST, int(port)), _Handler)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise NeedleError(f"port {port} on {HOST} is in use (another needle viz?); choose another with "
                                  "--port P, or --port 0 for any free port") from None
            raise NeedleError(f"cannot serve on {HOST}:{port}: {e.strerror or e}") from None
        self.httpd.daemon_threads = True
        self.httpd.viz = self
        self.recording = recording
        self._svgs = {}
        self._drawing = threading.Lock()
        self._thread = None

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/"

    def start(self) -> "Server":
        """Serve from a background thread (for tests and notebooks)."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="needle-viz", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        try:
            self.httpd.serve_forever()
        finally:
            self.httpd.server_close()

    def close(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join()
            self._thread = None
        self.httpd.server_close()

    # ---- answers ----------------------------------------------------------------------------------
    def index(self) -> dict:
        """The recording without the stages' text, pictures and code."""
        data = self.recording.data
        shots = {}
        for sid, shot in data["shots"].items():
            shots[sid] = {"target": shot["target"], "code_language": shot["code_language"], "groups": shot["groups"],
                          "kernels": [{k: v for k, v in kernel.items() if k != "code"} for kernel in shot["kernels"]],
                          "stages": {name: {"count": s["count"], "collapsed": s["collapsed"],
                                            "has_full": bool(s.get("full")), "has_picture": bool(s.get("dot"))}
                                     for name, s in shot["stages"].items()}}
        meta = {k: v for k, v in data.items() if k not in ("items", "shots")}
        return dict(meta, items=data["items"], shots=shots)

    def stage(self, sid: str, stage: str) -> dict:
        s = self.recording.data["shots"][sid]["stages"][stage]
        return {"text": s["text"], "nodes": s["nodes"], "collapsed": s["collapsed"], "count": s["count"]}

    def svg(self, sid: str, stage: str, full: bool) -> str:
        key = (sid, stage, full)
        with self._drawing:  # (one `dot` at a time: a large picture takes seconds)
            if key not in self._svgs:
                s = self.recording.data["shots"][sid]["stages"][stage]
                dot = (s.get("full") if full else None) or s.get("dot")
                if not dot:
                    raise KeyError(stage)
                with tempfile.TemporaryDirectory(prefix="needle-viz-") as folder:
                    path = draw.write(dot, os.path.join(folder, "stage.svg"))
                    with open(path) as f:
                        text = f.read()
                self._svgs[key] = text[text.find("<svg"):]  # (without the XML prolog and doctype)
            return self._svgs[key]


class _Handler(BaseHTTPRequestHandler):
    server_version = "needle-viz"

    def log_message(self, *args) -> None:  # (quiet: the terminal shows the address only)
        pass

    def do_GET(self) -> None:
        url = urlparse(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        viz = self.server.viz
        try:
            if url.path in ("/", "/index.html"):
                return self._file("index.html")
            if url.path.startswith("/static/"):
                return self._file(url.path[len("/static/"):])
            if url.path == "/api/recording":
                return self._json(viz.index())
            if url.path == "/api/stage":
                return self._json(viz.stage(query["shot"], query["stage"]))
            if url.path == "/api/svg":
                return self._send(200, viz.svg(query["shot"], query["stage"], query.get("full") == "1").encode(),
                                  _TYPES[".svg"])
            if url.path == "/api/code":
                return self._json({"code": viz.recording.code(query["shot"], int(query["kernel"]))})
        except (KeyError, IndexError, ValueError):
            return self._send(404, b"not in this recording", "text/plain")
        except NeedleError as e:  # (Graphviz failed on a picture)
            return self._send(500, str(e).encode(), "text/plain")
        self._send(404, b"not found", "text/plain")

    def _file(self, name: str) -> None:
        path = os.path.join(STATIC, os.path.basename(name))
        ext = os.path.splitext(path)[1]
        if ext not in _TYPES or not os.path.isfile(path):
            return self._send(404, b"not found", "text/plain")
        with open(path, "rb") as f:
            self._send(200, f.read(), _TYPES[ext])

    def _json(self, value) -> None:
        self._send(200, json.dumps(value).encode(), "application/json")

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)


def serve(recording, port: int = 8765, quiet: bool = False) -> None:
    """Serve the page of `recording` until Ctrl-C."""
    server = Server(recording, port)
    if not quiet:
        print(f"needle viz: serving {recording.summary()} at {server.url}  (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
