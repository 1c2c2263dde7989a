"""Metric sinks, chosen by the scheme of each ``--metrics_sink`` URL.

=====================================  ==========================================
``http://host:port/path`` (https too)  POST of the snapshot as JSON (``Snapshot.to_json``)
``graphite://host:port[/prefix]``      Graphite's plaintext protocol over TCP, a line per value
``pushgateway://host:port[/job]``      Prometheus Pushgateway, through ``prometheus_client``
                                       (the ``[prometheus]`` extra)
=====================================  ==========================================

A sink's ``push(snapshot, timeout)`` sends every metric's current (cumulative)
values and raises on any failure; the pusher (``metrics.pusher``) decides when
to push and what a failure means (nothing, for the pipeline).

Graphite paths are ``<prefix>.<job>.<kind>.<step>.<namespace>.<name>.<committed|attempted>``
with ``.count``/``.sum``/``.min``/``.max`` for distributions and ``.size`` for
string sets (bounded tries go to the JSON and nowhere else); ``<prefix>`` is
``beam`` by default, ``<job>`` the ``--job_name`` or the pipeline id's first 8
characters; each name is escaped: characters other than letters, digits, ``_``
and ``-`` become ``_``.
"""

from __future__ import annotations

import json
import re
import socket
import urllib.parse
import urllib.request
from typing import Callable
from typing import Iterator
from typing import Protocol

from beam_spark_inproc.metrics.snapshot import Snapshot

_UNSAFE = re.compile(r'[^A-Za-z0-9_\-]')


class Sink(Protocol):
    url: str

    def push(self, snapshot: Snapshot, timeout: float) -> None: ...


def _host_port(url: str, parsed, default_port: int | None) -> tuple[str, int]:
    port = parsed.port or default_port
    if not parsed.hostname or not port:
        raise ValueError(
            f'--metrics_sink {url!r}: give a host and a port, '
            f'e.g. {parsed.scheme}://127.0.0.1:{default_port or 8080}'
        )
    return parsed.hostname, port


class HttpJsonSink:
    """POSTs ``Snapshot.to_json()``; any status but 2xx is a failure."""

    def __init__(self, url: str):
        self.url = url
        _host_port(url, urllib.parse.urlsplit(url), 443 if url.startswith('https') else 80)

    def push(self, snapshot: Snapshot, timeout: float) -> None:
        body = json.dumps(snapshot.to_json()).encode()
        request = urllib.request.Request(
            self.url, data=body, method='POST', headers={'Content-Type': 'application/json'}
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()


def escape(name: str) -> str:
    """One Graphite path component: letters, digits, ``_`` and ``-`` only."""
    return _UNSAFE.sub('_', name) or '_'


def graphite_lines(snapshot: Snapshot, prefix: str = 'beam') -> Iterator[str]:
    job = escape(snapshot.job_name or snapshot.pipeline_id[:8])
    when = int(snapshot.timestamp)
    for m in snapshot.metrics:
        base = '.'.join(
            [prefix, job, m.kind] + [escape(part) for part in (m.step, m.namespace, m.name)]
        )
        for which in ('committed', 'attempted'):
            for field, value in numbers(m.kind, getattr(m, which)):
                path = f'{base}.{which}' + (f'.{field}' if field else '')
                yield f'{path} {value} {when}'


def numbers(kind: str, value) -> list[tuple[str, float]]:
    """(field, number) pairs of a plain value: what numeric sinks can show."""
    if value is None:
        return []
    if kind == 'counter':
        return [('', value)]
    if kind == 'distribution':
        return [(f, value[f]) for f in ('count', 'sum', 'min', 'max') if value[f] is not None]
    if kind == 'gauge':
        return [('', value['value'])]
    if kind == 'string_set':
        return [('size', len(value))]
    return []


class GraphiteSink:
    """Graphite's plaintext protocol: ``path value timestamp\\n`` over TCP (port 2003)."""

    def __init__(self, url: str):
        self.url = url
        parsed = urllib.parse.urlsplit(url)
        self._address = _host_port(url, parsed, 2003)
        path = parsed.path.strip('/')
        self._prefix = '.'.join(escape(p) for p in path.split('.')) if path else 'beam'

    def push(self, snapshot: Snapshot, timeout: float) -> None:
        data = ''.join(line + '\n' for line in graphite_lines(snapshot, self._prefix))
        with socket.create_connection(self._address, timeout=timeout) as conn:
            conn.settimeout(timeout)
            conn.sendall(data.encode())


class PushgatewaySink:
    """Pushes to a Prometheus Pushgateway with ``prometheus_client``.

    Grouping key: job (URL path, default ``beam``) and ``pipeline`` (the
    pipeline id); one push replaces the group. Metric names:
    ``beam_<kind>[_<field>]_<committed|attempted>`` (fields as Graphite's),
    labelled ``namespace``, ``name`` and ``step``; plus
    ``beam_pipeline_state{state=...} 1``.
    """

    def __init__(self, url: str):
        try:
            import prometheus_client  # noqa: F401
        except ImportError:
            raise ImportError(
                f'--metrics_sink {url!r} needs the Prometheus client library: '
                "pip install 'beam-spark-inproc[prometheus]' (prometheus-client)."
            ) from None
        self.url = url
        parsed = urllib.parse.urlsplit(url)
        host, port = _host_port(url, parsed, 9091)
        self._gateway = f'http://{host}:{port}'
        self._job = parsed.path.strip('/') or 'beam'

    def registry(self, snapshot: Snapshot):
        from prometheus_client import CollectorRegistry
        from prometheus_client import Gauge

        registry = CollectorRegistry()
        gauges: dict[str, Gauge] = {}
        for m in snapshot.metrics:
            for which in ('committed', 'attempted'):
                for field, value in numbers(m.kind, getattr(m, which)):
                    name = '_'.join(p for p in ('beam', m.kind, field, which) if p)
                    if name not in gauges:
                        gauges[name] = Gauge(
                            name,
                            f'Beam {m.kind} metric ({which})',
                            ['namespace', 'name', 'step'],
                            registry=registry,
                        )
                    gauges[name].labels(m.namespace, m.name, m.step).set(value)
        Gauge(
            'beam_pipeline_state',
            'The pipeline state (Beam PipelineState)',
            ['state'],
            registry=registry,
        ).labels(snapshot.state).set(1)
        return registry

    def push(self, snapshot: Snapshot, timeout: float) -> None:
        from prometheus_client import push_to_gateway

        push_to_gateway(
            self._gateway,
            job=self._job,
            grouping_key={'pipeline': snapshot.pipeline_id},
            registry=self.registry(snapshot),
            timeout=timeout,
        )


SINKS: dict[str, Callable[[str], Sink]] = {
    'http': HttpJsonSink,
    'https': HttpJsonSink,
    'graphite': GraphiteSink,
    'pushgateway': PushgatewaySink,
}


def sink_for(url: str) -> Sink:
    """The sink for ``url``; an unknown scheme raises, naming the known ones."""
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme not in SINKS:
        raise ValueError(
            f'--metrics_sink {url!r}: unknown scheme {scheme!r}; use one of '
            + ', '.join(f'{s}://' for s in SINKS)
            + ' (e.g. http://127.0.0.1:8080/metrics, graphite://127.0.0.1:2003).'
        )
    return SINKS[scheme](url)
