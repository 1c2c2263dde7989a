"""The attempt channel, worker side: metrics of a task attempt that did not commit.

A bundle's metrics normally reach the driver as a control row (``protocol.report``),
which Spark drops with the rest of a failed attempt's output. So when a task
attempt ends without handing all its output to Spark (its bundle raised, or
Spark stopped reading: a failure further down the same task), the worker sends
the monitoring infos of its bundles straight to the driver over TCP, before the
exception propagates: the driver acknowledges once it has stored them, so they
are counted before Spark even schedules the retry.

The frame is ``protocol.attempts``'s (plain protobuf, no pickle: the driver
parses it safely). Sending is best effort with a short timeout: a driver the worker
cannot reach (see docs/metrics.md) costs the attempted counts, nothing else.
"""

from __future__ import annotations

import socket

from beam_spark_inproc.protocol.attempts import ACK
from beam_spark_inproc.protocol.attempts import frame

TIMEOUT_SECONDS = 5.0


def send(channel: tuple, stage: str, infos: list[bytes], timeout: float = TIMEOUT_SECONDS) -> bool:
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
