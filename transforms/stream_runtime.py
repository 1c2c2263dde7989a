"""What WriteToSpark and SparkSql do in a stream, each micro-batch.

The streaming loop (``execution.streaming.spark_sinks``) decides when a
runner-native stage runs and hands this module's ``run`` the micro-batch's
input (engine data, cached) through the runner, as the batch executor gets
``runtime.build``. Both keep the rows in the engine: a DataFrame of the
micro-batch (``Engine.to_dataframe``), never a collect to the driver.

**WriteToSpark** appends each micro-batch's rows (the panes its upstream
fired, the elements that reached it) to a path, or into the folder of a
file-backed catalog table (``stream_tables``), **exactly once** across
Spark task retries and driver restarts (``convert.ToArrow``, or
``stream_convert.WindowedToArrow`` when the window and pane go into
columns). Per sink and micro-batch N (the loop's micro-batch id, which a
replay after a restart reuses):

1. if N is at most the sink's **published** micro-batch (its record
   ``<path>/_beam_spark_sink/<sink id>/published.json``), the micro-batch's
   rows are there already: nothing is written (Spark's own file stream sink
   skips a batch id its log has, for the same reason);
2. else Spark writes them into a staging folder
   (``_beam_spark_sink/<sink id>/staging/<N>``) with its commit protocol, so
   a retried task's files are those of its committed attempt;
3. the staging folder's data files (empty ones left out) are **renamed** into
   the path, keeping partition folders, as ``beam-<sink>-mb<N>-<Spark's
   name>``; then the published record says N, written atomically (a
   temporary file renamed). The staging folder goes.

A driver that dies between 3's renames and its record leaves files of a
micro-batch the record does not cover: when the stream starts again the sink
removes its files whose micro-batch is after the published one, and its
staging folder, before it writes, and the replayed micro-batch writes them
again. Spark's readers skip folders whose names start with ``_``, so
``spark.read.parquet(path)`` sees the data files only.

The sink id is made when a checkpoint location first runs the pipeline and
kept there (``spark_sinks.json``, by stage): a stream resumed from it
continues the same sink; a new stream (a new checkpoint) into the same path
starts its own. Exactly once assumes a replayed micro-batch gives the same
rows as the first attempt did, as it does for TestStream and event-time
triggers; a processing-time trigger on the wall clock may fire differently
on replay, and the published rows are then the first attempt's.

The renames are the driver's, with ``os``: the path must be on a file system
the driver shares with Spark's executors (a local path, a mounted volume; on
Spark Connect, with the server). What a stream refuses is
``planning.native_streaming``'s.

**SparkSql** runs over the micro-batch's fired panes of its one windowed
input: the view holds the elements' fields and the window's bounds
(``WindowedToArrow``), the query is analysed on it at once (the view is
replaced in the next micro-batch), and its rows go back into the windows
their bounds name (``stream_convert.WindowedToBeamRows``), lazily, as any
stage's result.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import shutil
import urllib.parse
import uuid
from typing import Any
from typing import Callable

from beam_spark_inproc.planning import native
from beam_spark_inproc.planning.native import SQL_URN
from beam_spark_inproc.planning.native import WRITE_URN
from beam_spark_inproc.transforms import specs
from beam_spark_inproc.transforms import types
from beam_spark_inproc.transforms.convert import ToArrow
from beam_spark_inproc.transforms.stream_convert import WindowedToArrow
from beam_spark_inproc.transforms.stream_convert import WindowedToBeamRows

_LOGGER = logging.getLogger(__name__)
SINK_FOLDER = '_beam_spark_sink'
SINK_IDS = 'spark_sinks.json'


class StreamStages:
    """The runner-native stages of one stream: ``run`` per stage and
    micro-batch. ``engine``: the loop's; ``coders``: the pipeline's by id;
    ``root``: the checkpoint location; ``job``: a context naming the Spark
    jobs of the micro-batch."""

    def __init__(self, engine: Any, coders: Any, root: str, job):
        self._engine, self._coders, self._root, self._job = engine, coders, root, job
        self._sinks: dict[str, PathSink] = {}

    def run(self, stage: Any, key: str, data: Any, micro_batch: int) -> Any:
        """Writes (None) or queries (the result's rows) ``data``, stage
        ``key``'s input in ``micro_batch``."""
        spec = json.loads(stage.native_payload)
        label = native.named(', '.join(stage.labels), native.kind(stage.native_urn, spec))
        if stage.native_urn == SQL_URN:
            return self._query(stage, spec, label, data)
        if stage.native_urn != WRITE_URN:
            raise ValueError(f'{label}: no streaming handler for {stage.native_urn}')
        self._write(stage, spec, label, key, data, micro_batch)
        return None

    def _write(self, stage, spec: dict, label: str, key: str, data: Any, micro_batch: int) -> None:
        sink = self._sinks.get(key)
        if sink is None:
            if spec['table']:  # a catalog table's folder (stream_tables)
                from beam_spark_inproc.transforms import stream_tables

                session = self._engine.spark_session()
                table = stream_tables.target(session, spec, label)
                sink = PathSink(
                    table.location,
                    self._sink_id(key),
                    label,
                    table.write_options(),
                    functools.partial(stream_tables.refresh, session, table, label),
                )
            else:
                sink = PathSink(_local(spec['path']), self._sink_id(key), label)
            self._sinks[key] = sink
            sink.recover()
        if micro_batch <= sink.published:
            _LOGGER.info(
                '%s: micro-batch %d was published before the restart; not written again',
                label,
                micro_batch,
            )
            return
        schema = specs.decode_schema(spec['schema'])
        coder = self._coders[stage.inputs[0].coder_id]
        columns = spec.get('window_columns') or {}
        fn = (
            WindowedToArrow(coder, schema, columns=tuple(columns.items()))
            if columns
            else ToArrow(coder, schema)
        )
        dataframe = self._engine.to_dataframe(data, fn, schema)
        with self._job():
            sink.write(micro_batch, dataframe, spec, self._engine.spark_session())

    def _query(self, stage, spec: dict, label: str, data: Any) -> Any:
        ((name, view),) = spec['views'].items()
        view_schema = specs.decode_schema(view)
        columns = spec['window_columns']
        session = self._engine.spark_session()
        coder = self._coders[stage.inputs[0].coder_id]
        frame = self._engine.to_dataframe(
            data, WindowedToArrow(coder, view_schema, columns=tuple(columns.items())), view_schema
        )
        schema = specs.decode_schema(spec['schema'])
        try:
            # Analysed now, on the view as it stands (replaced next time).
            frame.createOrReplaceTempView(name)
            result = session.sql(spec['query'])
        except Exception as e:  # pylint: disable=broad-except
            raise specs.spark_error(label, e) from None
        out = stage.outputs[0]
        return self._engine.map_stage(
            self._engine.arrow_source(result),
            WindowedToBeamRows(
                self._coders[out.coder_id],
                types.row_type(schema),
                tuple(f.name for f in schema),
                columns['window_start'],
                columns['window_end'],
                bool(spec.get('global_window')),
                label,
            ),
        )

    def _sink_id(self, key: str) -> str:
        """The sink's id, kept in the checkpoint (made on its first run)."""
        path = os.path.join(self._root, SINK_IDS)
        ids: dict = {}
        if os.path.exists(path):
            with open(path) as f:
                ids = json.load(f)
        if key not in ids:
            ids[key] = uuid.uuid4().hex[:12]
            _write_atomically(path, json.dumps(ids, sort_keys=True).encode())
        return ids[key]


def _local(path: str) -> str:
    parsed = urllib.parse.urlparse(path)
    return os.path.abspath(parsed.path if parsed.scheme == 'file' else path)


class PathSink:
    """One WriteToSpark's micro-batches published into its path (see the
    module doc). ``options``: what the staged write takes instead of the
    spec's (a table's format and partition columns); ``on_publish``: called
    after each publish and after ``recover`` (a table's catalog refresh)."""

    def __init__(
        self,
        path: str,
        sink_id: str,
        label: str,
        options: dict | None = None,
        on_publish: Callable[[], None] | None = None,
    ):
        self.path = path
        self.sink_id = sink_id
        self.label = label
        self._options = options or {}
        self._on_publish = on_publish
        self.folder = os.path.join(path, SINK_FOLDER, sink_id)
        self._record = os.path.join(self.folder, 'published.json')
        self._prefix = f'beam-{sink_id}-mb'
        self._name = re.compile(re.escape(self._prefix) + r'(\d+)-')
        self.published = -1
        if os.path.exists(self._record):
            with open(self._record) as f:
                self.published = json.load(f)['micro_batch']

    def recover(self) -> int:
        """Removes this sink's files of micro-batches after the published
        one (a publish the driver did not finish) and its staging folder;
        returns how many files went."""
        shutil.rmtree(os.path.join(self.folder, 'staging'), ignore_errors=True)
        removed = 0
        for path in self._data_files(self.path):
            match = self._name.match(os.path.basename(path))
            if match and int(match.group(1)) > self.published:
                os.remove(path)
                removed += 1
        if removed:
            _LOGGER.info(
                '%s: removed %d files of micro-batches after the published %d from %s',
                self.label,
                removed,
                self.published,
                self.path,
            )
        if self._on_publish is not None:
            self._on_publish()
        return removed

    def write(self, micro_batch: int, dataframe: Any, spec: dict, session: Any) -> list[str]:
        """Spark writes the micro-batch into staging, the driver renames its
        files into the path and records it published; returns the files."""
        staging = os.path.join(self.folder, 'staging', str(micro_batch))
        shutil.rmtree(staging, ignore_errors=True)
        specs.write_dataframe(
            session,
            dict(spec, **self._options, table=None, path=staging, mode='overwrite'),
            dataframe,
            self.label,
        )
        published = []
        for source in self._data_files(staging):
            if _empty(source):
                continue
            folder = os.path.relpath(os.path.dirname(source), staging)
            target = os.path.normpath(
                os.path.join(
                    self.path, folder, f'{self._prefix}{micro_batch}-{os.path.basename(source)}'
                )
            )
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.replace(source, target)
            published.append(os.path.relpath(target, self.path))
        _write_atomically(
            self._record, json.dumps({'micro_batch': micro_batch, 'files': published}).encode()
        )
        self.published = micro_batch
        shutil.rmtree(os.path.dirname(staging), ignore_errors=True)
        if self._on_publish is not None:
            self._on_publish()
        return published

    @staticmethod
    def _data_files(root: str) -> list[str]:
        """Files under ``root`` Spark's readers read (not under or named
        ``_...`` or ``.``...)."""
        found = []
        for folder, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if not d.startswith(('_', '.'))]
            found += [os.path.join(folder, n) for n in names if not n.startswith(('_', '.'))]
        return found


def _empty(path: str) -> bool:
    """Whether a written data file holds no rows (Spark writes one with the
    schema only when a micro-batch has none)."""
    if os.path.getsize(path) == 0:
        return True
    if path.endswith('.parquet'):
        import pyarrow.parquet as pq

        try:
            return pq.read_metadata(path).num_rows == 0
        except Exception:  # pylint: disable=broad-except
            return False
    return False


def _write_atomically(path: str, data: bytes) -> None:
    tmp = path + '.tmp'
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(tmp, 'wb') as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
