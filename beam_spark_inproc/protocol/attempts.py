"""The attempt channel's frame: a task attempt's metrics, sent over TCP.

Written by the worker (``worker.attempts.send``) when an attempt ends without
committing, read by the driver (``metrics.attempts.AttemptReceiver``), which
answers ``ACK`` once it has stored them. Frame: ``MAGIC``, the run's 16-byte
token, then the stage name and a ``ProcessBundleResponse`` holding the
MonitoringInfos, each as a 4-byte big-endian length and its bytes. Plain
protobuf, no pickle: the driver parses it safely.
"""

from __future__ import annotations

import struct

from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.portability.api import metrics_pb2

MAGIC = b'BSIA1'
ACK = b'\x01'


def frame(token: bytes, stage: str, infos: list[bytes]) -> bytes:
    response = beam_fn_api_pb2.ProcessBundleResponse(
        monitoring_infos=[metrics_pb2.MonitoringInfo.FromString(i) for i in infos]
    )
    name, payload = stage.encode(), response.SerializeToString()
    return b''.join(
        [MAGIC, token, struct.pack('>I', len(name)), name, struct.pack('>I', len(payload)), payload]
    )
