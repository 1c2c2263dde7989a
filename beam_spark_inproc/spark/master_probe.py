"""Does a ``spark://HOST:PORT`` endpoint speak Spark? Asked before any JVM starts.

A standalone master that cannot be reached is found by a TCP connect
(``session.check_master``). Something else listening on the port (the
master's web UI on 8080, an HTTP proxy, a database) accepts the connection
too, and Spark then spends about two minutes on registration retries before
a Py4J error about a stopped Spark context that names neither the master
nor ``--spark_master``.

So the runner sends the endpoint one message of Spark's RPC protocol (the
transport every Spark RPC endpoint, a standalone master's included, serves)
and looks at the first bytes of the answer:

* the request: a frame of Spark's network transport (``MessageEncoder``: an
  8-byte frame length, a 1-byte message type, ``RpcRequest`` = 3, an 8-byte
  request id, a 4-byte body length) whose body is ``NettyRpcEnv``'s
  ``RequestMessage``: no sender address, the receiver's address and endpoint
  name, and the content Java-serialized. The content is a Java string (the
  simplest object Java serialization has; it ends in an empty line, so that
  a line-based server sees a whole request) and the endpoint name is one no
  Spark process registers, so the endpoint answers with an ``RpcFailure``
  ("Could not find ...") and nothing reaches the master's own endpoints;
* a Spark endpoint answers with a frame of type ``RpcResponse`` (4) or
  ``RpcFailure`` (5): it speaks Spark (authentication turned on answers an
  ``RpcFailure`` too);
* anything else is what answered: ``HTTP/1.1 400 ...`` (a web server, the
  master's UI), a TLS alert, some other protocol's greeting, or nothing at
  all within the timeout, or a closed connection.

A master whose RPC runs over TLS (``spark.ssl.rpc.enabled``, or
``spark.ssl.enabled`` that it inherits) answers a plain frame by closing
the connection; with either set in the session's configuration the probe is
not made (the TCP connect still is).
"""

from __future__ import annotations

import socket
import struct
from typing import Optional

# Spark's network transport (org.apache.spark.network.protocol.Message.Type).
RPC_REQUEST, RPC_RESPONSE, RPC_FAILURE = 3, 4, 5
# The endpoint the probe addresses: no Spark process registers it.
PROBE_ENDPOINT = 'beam-spark-inproc-probe'
# java.io.ObjectOutputStream's stream header, then TC_STRING.
_JAVA_STREAM = b'\xac\xed\x00\x05'
_TC_STRING = b'\x74'
TLS_KEYS = ('spark.ssl.rpc.enabled', 'spark.ssl.enabled')


def _utf(text: str) -> bytes:
    """``DataOutputStream.writeUTF`` (ASCII here: the same bytes)."""
    data = text.encode('utf-8')
    return struct.pack('>H', len(data)) + data


def request(host: str, port: int) -> bytes:
    """One RpcRequest frame to ``PROBE_ENDPOINT`` at host:port."""
    body = (
        b'\x00'  # no sender address (a client that listens nowhere)
        + b'\x01'
        + _utf(host)
        + struct.pack('>i', port)
        + _utf(PROBE_ENDPOINT)
        + _JAVA_STREAM
        + _TC_STRING
        # Ends in an empty line: a line-based server (HTTP, SMTP, ...) that
        # waits for the end of a request line or of headers answers too.
        + _utf('probe\r\n\r\n')
    )
    header_length = 8 + 1 + 8 + 4
    return (
        struct.pack('>q', header_length + len(body))
        + bytes([RPC_REQUEST])
        + struct.pack('>q', 1)
        + struct.pack('>i', len(body))
        + body
    )


def is_spark_answer(data: bytes) -> bool:
    """The first 9 bytes are a transport frame of an RPC answer."""
    if len(data) < 9:
        return False
    (length,) = struct.unpack('>q', data[:8])
    return 9 <= length < (1 << 31) and data[8] in (RPC_RESPONSE, RPC_FAILURE)


def what_answered(data: bytes) -> str:
    """The answer of something that is not Spark, in a few words."""
    if data.startswith(b'HTTP/'):
        status = data.split(b'\r\n', 1)[0].split(b'\n', 1)[0]
        return f'an HTTP server ({status.decode("latin-1")!r})'
    if data.lstrip()[:1] == b'<':  # an HTTP/0.9 answer: the page alone
        return 'an HTTP server (it answered with a page of HTML)'
    if data[:1] in (b'\x15', b'\x16') and data[1:2] == b'\x03':
        return 'a TLS server'
    printable = data.split(b'\n', 1)[0].rstrip(b'\r')[:60].decode('latin-1')
    if printable and printable.isprintable():
        return f'something else, which answered {printable!r}'
    return f'something else, which answered {len(data)} bytes starting {data[:16].hex(" ")}'


def probe(host: str, port: int, timeout: float) -> Optional[str]:
    """None when host:port answers as a Spark RPC endpoint; else what it did
    (e.g. "an HTTP server ('HTTP/1.1 400 Bad Request')"). A connection that
    cannot be made raises OSError."""
    data = b''
    with socket.create_connection((host, port), timeout=timeout) as connection:
        connection.settimeout(timeout)
        try:
            connection.sendall(request(host, port))
            while len(data) < 9:
                chunk = connection.recv(4096)
                if not chunk:
                    break
                data += chunk
        except socket.timeout:
            if not data:
                return (
                    'something that accepted the connection but answered '
                    f'nothing within {timeout:g} s'
                )
        except OSError as e:  # reset by the peer
            if not data:
                return f'something that accepted the connection, then reset it ({e.strerror or e})'
    if is_spark_answer(data):
        return None
    if not data:
        return (
            'something that accepted the connection, then closed it without an '
            'answer (a master whose RPC runs over TLS does that: say so with '
            '--spark_conf spark.ssl.rpc.enabled=true)'
        )
    return what_answered(data)
