"""The attempt channel, worker side: metrics of a task attempt that did not commit.

A bundle's metrics normally reach the driver as a control row (``report``),
which Spark drops with the rest of a failed attempt's output. So when a task
attempt ends without handing all its output to Spark (its bundle raised, or
Spark stopped reading: a failure further down the same task), the worker sends
the monitoring infos of its bundles straight to the driver over TCP, before the
exception propagates: the driver acknowledges once it has stored them, so they
are counted before Spark even schedules the retry.

Frame: ``MAGIC``, the run's 16-byte token, then the stage name and a
``ProcessBundleResponse`` holding the MonitoringInfos, each as a 4-byte
big-endian length and its bytes. Plain protobuf, no pickle: the driver parses
it safely. Sending is best effort with a short timeout: a driver the worker
cannot reach (see docs/metrics.md) costs the attempted counts, nothing else.
"""
from __future__ import annotations

import socket
import struct

from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.portability.api import metrics_pb2

MAGIC = b'BSIA1'
ACK = b'\x01'
TIMEOUT_SECONDS = 5.0


def frame(token: bytes, stage: str, infos: list[bytes]) -> bytes:
    response = beam_fn_api_pb2.ProcessBundleResponse(monitoring_infos=[
        metrics_pb2.MonitoringInfo.FromString(i) for i in infos])
    name, payload = stage.encode(), response.SerializeToString()
    return b''.join([MAGIC, token, struct.pack('>I', len(name)), name,
                     struct.pack('>I', len(payload)), payload])


def send(channel: tuple, stage: str, infos: list[bytes],
         timeout: float = TIMEOUT_SECONDS) -> bool:
    """Sends to ``channel`` = (host, port, token); True once the driver has them."""
    if not channel or not infos:
        return False
    host, port, token = channel
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            conn.sendall(frame(token, stage, infos))
            conn.shutdown(socket.SHUT_WR)
            return conn.recv(1) == ACK
    except OSError:
        return False
