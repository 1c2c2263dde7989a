"""The attempt channel, driver side: a TCP listener for uncommitted attempts' metrics.

See ``worker.attempts`` for why, ``protocol.attempts`` for the frame. One listener per run,
on an address of this process the Python workers can reach
(``spark.session.callback_host``: the loopback address for local masters and a
local Connect server); frames must carry the run's random token, and only
protobuf is parsed. Each accepted frame goes to ``LiveMetrics.add_attempt``
before it is acknowledged.
"""

from __future__ import annotations

import hmac
import logging
import os
import socketserver
import struct
import threading

from apache_beam.portability.api import beam_fn_api_pb2

from beam_spark_inproc.metrics.live import LiveMetrics
from beam_spark_inproc.protocol.attempts import ACK
from beam_spark_inproc.protocol.attempts import MAGIC

_LOGGER = logging.getLogger(__name__)
_MAX_FRAME = 256 << 20
_READ_TIMEOUT = 30.0


class _Handler(socketserver.StreamRequestHandler):
    timeout = _READ_TIMEOUT

    def handle(self) -> None:
        server: _Server = self.server  # type: ignore[assignment]
        try:
            if self.rfile.read(len(MAGIC)) != MAGIC:
                return
            if not hmac.compare_digest(self.rfile.read(len(server.token)), server.token):
                return
            (n,) = struct.unpack('>I', self.rfile.read(4))
            stage = self.rfile.read(n).decode()
            (n,) = struct.unpack('>I', self.rfile.read(4))
            if n > _MAX_FRAME:
                return
            response = beam_fn_api_pb2.ProcessBundleResponse.FromString(self.rfile.read(n))
            server.metrics.add_attempt(stage, list(response.monitoring_infos))
            self.wfile.write(ACK)
        except Exception as e:  # a bad frame is dropped, never the run
            _LOGGER.debug('Dropped an attempt-metrics frame: %s', e)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    token: bytes
    metrics: LiveMetrics


class AttemptReceiver:
    """Listens on ``host`` (a free port) until ``close()``; ``channel`` goes to the tasks."""

    def __init__(self, host: str, metrics: LiveMetrics):
        self._server = _Server((host, 0), _Handler)
        self._server.token = os.urandom(16)
        self._server.metrics = metrics
        self.channel = (host, self._server.server_address[1], self._server.token)
        self._thread = threading.Thread(
            # close() waits for the loop's next poll: a short one keeps that
            # out of every pipeline's fixed cost (0.1 s on average at 0.2 s).
            target=self._server.serve_forever,
            kwargs={'poll_interval': 0.02},
            name='beam-attempt-metrics',
            daemon=True,
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
