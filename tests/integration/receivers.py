"""Metric receivers on 127.0.0.1 for the tests: HTTP JSON, Graphite, Pushgateway.

Each runs a real server on a free port in a daemon thread, records what it
received, and is a context manager (stopped on exit). ``Blackhole`` accepts
connections and never answers (a sink that hangs); ``dead_url`` names a port
nothing listens on.
"""

from __future__ import annotations

import http.server
import json
import socket
import socketserver
import threading


class _Quiet(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get('Content-Length') or 0))


class _Receiver:
    scheme = ''

    def __init__(self, server):
        self.server = server
        self.received: list = []
        self.lock = threading.Lock()
        self.server.receiver = self
        self.port = server.server_address[1]
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={'poll_interval': 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f'{self.scheme}://127.0.0.1:{self.port}'

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add(self, item) -> None:
        with self.lock:
            self.received.append(item)


class _JsonHandler(_Quiet):
    def do_POST(self) -> None:
        assert self.headers['Content-Type'] == 'application/json'
        self.server.receiver.add((self.path, json.loads(self._body())))
        self.send_response(204)
        self.end_headers()


class HttpReceiver(_Receiver):
    """Records (path, JSON document) of each POST."""

    scheme = 'http'

    def __init__(self):
        super().__init__(http.server.ThreadingHTTPServer(('127.0.0.1', 0), _JsonHandler))

    @property
    def documents(self) -> list[dict]:
        with self.lock:
            return [doc for _, doc in self.received]


class _GraphiteHandler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        lines = self.rfile.read().decode().splitlines()
        self.server.receiver.add(lines)


class _TCPServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class GraphiteReceiver(_Receiver):
    """Records the lines of each connection (one connection per push)."""

    scheme = 'graphite'

    def __init__(self):
        super().__init__(_TCPServer(('127.0.0.1', 0), _GraphiteHandler))

    @property
    def pushes(self) -> list[list[str]]:
        with self.lock:
            return list(self.received)


class _PushgatewayHandler(_Quiet):
    def do_PUT(self) -> None:  # prometheus_client's push_to_gateway
        from prometheus_client.parser import text_string_to_metric_families

        body = self._body().decode()
        samples = [
            (s.name, dict(s.labels), s.value)
            for family in text_string_to_metric_families(body)
            for s in family.samples
        ]
        self.server.receiver.add((self.path, samples))
        self.send_response(200)
        self.end_headers()


class PushgatewayStandIn(_Receiver):
    """Answers PUT /metrics/job/<job>/<label>/<value> as a Pushgateway does;
    records (path, [(name, labels, value)]) parsed with prometheus_client's
    own text-format parser."""

    scheme = 'pushgateway'

    def __init__(self):
        super().__init__(http.server.ThreadingHTTPServer(('127.0.0.1', 0), _PushgatewayHandler))


class Blackhole:
    """Accepts TCP connections and never reads nor answers."""

    def __init__(self):
        self._socket = socket.socket()
        self._socket.bind(('127.0.0.1', 0))
        self._socket.listen(16)
        self.port = self._socket.getsockname()[1]

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._socket.close()


def dead_url(scheme: str) -> str:
    """A URL on a loopback port nothing listens on (connection refused)."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    return f'{scheme}://127.0.0.1:{port}'
