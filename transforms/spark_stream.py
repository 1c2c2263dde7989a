"""ReadFromSpark over a streaming DataFrame: a source of the micro-batch loop.

``ReadFromSpark(dataframe=spark.readStream...load(), event_time='ts',
max_out_of_orderness=30)`` (or ``ReadFromSpark.stream(format='kafka',
options={...}, event_time='timestamp')``) is an unbounded PCollection of Beam
rows: each element at the instant of its ``event_time`` column, in the global
window. Any streaming source the session has works the same way: Kafka (with
Spark's Kafka connector on the cluster), files landing in a folder, ``rate``,
Delta tables, Python data sources (``pyspark.sql.datasource``).

**How the Spark side runs: a staging query.** The source starts one Structured
Streaming query of the DataFrame, ``foreachBatch(StageBatch)``, with its own
Spark checkpoint. ``StageBatch`` writes Spark's batch ``N`` as Parquet into
``batches/N/`` (Spark's writer and commit protocol), computes the batch's row
count and largest event time from what it wrote, and then writes the marker
file ``batches/N/_BEAM_STAGED.json`` (temporary name, then rename): a batch is
staged once its marker exists. The loop's source (``SparkStreamSource``)
steps in Spark's batch ids: a micro-batch takes the staged batches after its
position (up to ``MAX_BATCHES``), reads their folders as a DataFrame and makes
the loop's rows from it in Spark tasks (``convert.ToTimestampedRows``): rows
never pass through the driver, and Spark's query runs ahead of the loop on
its own thread (classic Spark: the driver; Spark Connect: the server, which
runs the ``foreachBatch`` function in its Python workers). Where a step finds
nothing staged it waits up to ``POLL_SECONDS`` and returns no rows.

Layout under the stream's checkpoint location, ``sources/<stage>/``::

    source.json     which source owns the folder (``identity``): another
                    source's folder is refused before the query starts
    checkpoint/     the Spark query's checkpoint (offsets, commits)
    batches/N/      Spark's batch N: Parquet files, then the marker

**Exactly once across a restart.** The position in the loop's commit record
is the next Spark batch id (``checkpoint``). Spark's own checkpoint is at or
ahead of it: Spark commits batch N once ``StageBatch`` returned, whether the
loop consumed it or not. The staged folders of batches the loop has not
committed stay until it has: a restarted stream reads them again by id from
its committed position, while the restarted query goes on after its own last
commit. A batch Spark staged but did not commit before the driver died is
run again by Spark with the same offsets (Structured Streaming replays its
offset log); ``StageBatch`` finds its marker and leaves it as it is, so the
loop never sees a folder change after it was staged. A folder whose marker
is missing was never read; Spark overwrites it. Staged folders are removed
once a later commit record no longer needs them (``checkpoint``: the batches
before the position of the previous, durable record).

**Watermark.** Like Spark's ``withWatermark``: the largest event time staged
so far minus ``max_out_of_orderness``, never moving back; -inf until the
first row. The elements of a micro-batch are judged against the watermark
before it (Beam's lateness, per stage: a late element is one behind its
stage's input watermark). When the query ends by itself
(``trigger='available_now'``: it stops once it has read what was available)
and every staged batch is stepped, the watermark goes to +inf and the stream
finishes, firing every window.

**Debug engine** (``--inproc_debug``): the query runs on the local
SparkSession the runner uses for Spark work (that of the DataFrame), and each
micro-batch's staged Parquet is read into the driver (``arrow_source``) and
run by the in-driver engine: the same positions, markers and restart.

Identity (``source.json``): the format, path and a hash of the options for
``ReadFromSpark.stream(format=...)``; for a DataFrame, its schema and event
time column (or the ``name=`` given). A changed Spark source under the same
checkpoint location is also refused by Spark itself when its offsets do not
fit.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
from typing import Any

from apache_beam.utils.timestamp import MAX_TIMESTAMP
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.timestamp import Timestamp

from beam_spark_inproc.planning import native
from beam_spark_inproc.transforms import specs
from beam_spark_inproc.transforms import types

MARKER = '_BEAM_STAGED.json'
# A step waits at most this long for Spark's next batch (it returns no rows
# then: the loop checks for a stop and due processing-time timers).
POLL_SECONDS = 1.0
# Staged Spark batches one loop micro-batch takes at most.
MAX_BATCHES = 16
AVAILABLE_NOW = 'available_now'


def _seconds(value) -> float:
    """``max_out_of_orderness``: seconds, or Beam's ``Duration``."""
    micros = getattr(value, 'micros', None)
    return micros / 1e6 if micros is not None else float(value)


def stream_spec(
    what: str, dataframe, event_time, max_out_of_orderness, trigger, identity: dict | None
) -> dict:
    """The spec of a streaming read (checked: the event-time column, the
    trigger); raises SparkInteropError naming ``what``."""
    if dataframe is None or not dataframe.isStreaming:
        raise specs.SparkInteropError(
            f'{what}: event_time=, max_out_of_orderness= and trigger= read a '
            'streaming DataFrame (spark.readStream...), and this one is a batch '
            'DataFrame (a table, a query or spark.read...). Drop them to read '
            'it bounded, or give ReadFromSpark a streaming DataFrame.'
        )
    if event_time is None:
        raise specs.SparkInteropError(
            f'{what}: a streaming DataFrame needs event_time=: the timestamp '
            "column giving each element's event time (e.g. 'timestamp' of "
            "Kafka's or the rate source's rows), and max_out_of_orderness= how "
            'late (seconds) rows may come behind the latest one.'
        )
    fields = {f.name: f for f in dataframe.schema.fields}
    if event_time not in fields:
        raise specs.SparkInteropError(
            f'{what}: event_time={event_time!r} is not a column of the streaming '
            f'DataFrame (columns: {", ".join(fields)}); add it, e.g. with '
            "withColumn(..., F.col(...).cast('timestamp'))."
        )
    kind = fields[event_time].dataType.simpleString()
    if kind not in ('timestamp', 'timestamp_ntz'):
        raise specs.SparkInteropError(
            f'{what}: event_time column {event_time!r} is {kind}, not a '
            "timestamp; cast it (F.col(...).cast('timestamp'), or "
            'F.timestamp_millis for epoch milliseconds).'
        )
    lateness = _seconds(max_out_of_orderness or 0)
    if lateness < 0:
        raise specs.SparkInteropError(f'{what}: max_out_of_orderness must be >= 0, got {lateness}.')
    if (
        trigger is not None
        and trigger != AVAILABLE_NOW
        and not (isinstance(trigger, str) and trigger.strip())
    ):
        raise specs.SparkInteropError(
            f"{what}: trigger is '{AVAILABLE_NOW}' or a processing-time interval "
            f"such as '5 seconds', got {trigger!r}."
        )
    if identity is None:
        identity = {'schema': dataframe.schema.simpleString()}
    identity = dict(identity, event_time=event_time)
    return {
        'event_time': event_time,
        'lateness_micros': int(lateness * 1e6),
        'trigger': trigger,
        'identity': identity,
    }


def _not_found(error: Exception) -> bool:
    """Whether Spark found no data source of the format asked for."""
    from beam_spark_inproc.compat import pyspark as pyspark_compat

    # PySpark 3.5 leaves the JVM's SparkClassNotFoundException a Py4J error:
    # its condition is in the text only.
    return pyspark_compat.error_condition(error) == 'DATA_SOURCE_NOT_FOUND' or (
        'DATA_SOURCE_NOT_FOUND' in str(error)
    )


def reader(session, what: str, format: str, path, options: dict | None, schema):
    """``session.readStream`` of ``format`` (analysed: an unknown source fails
    here) and the identity of that source. On a PySpark without Python data
    sources (3.5) an unknown format is refused naming the release they need
    (``compat.pyspark.python_data_sources_error``), before any Spark job."""
    from beam_spark_inproc.compat import pyspark as pyspark_compat

    options = {k: str(v) for k, v in (options or {}).items()}
    try:
        stream = session.readStream.format(format).options(**options)
        if schema is not None:
            stream = stream.schema(schema)
        dataframe = stream.load(path) if path is not None else stream.load()
        dataframe.schema  # noqa: B018 - analysed now (lazy over Connect)
    except Exception as e:
        problem = _not_found(e) and pyspark_compat.python_data_sources_error(what, format)
        if problem:
            raise specs.SparkInteropError(problem) from None
        raise specs.spark_error(what, e) from None
    digest = hashlib.sha256(json.dumps(options, sort_keys=True).encode())
    return dataframe, {'format': format, 'path': path, 'options': digest.hexdigest()[:16]}


@dataclasses.dataclass(frozen=True)
class StageBatch:
    """The staging query's ``foreachBatch`` function (module doc): Spark's
    batch ``batch_id`` as Parquet in ``folder/batch_id``, then its marker.
    Runs where Spark runs the function: the driver on classic Spark, the
    server's Python workers over Spark Connect."""

    folder: str
    event_time: str

    def __call__(self, dataframe, batch_id: int) -> None:
        from pyspark.sql import functions as f

        target = os.path.join(self.folder, str(batch_id))
        marker = os.path.join(target, MARKER)
        if os.path.exists(marker):  # staged before the driver died: as it is
            return
        dataframe.write.mode('overwrite').parquet(target)
        written = dataframe.sparkSession.read.parquet(target)
        stats = written.agg(
            f.count(f.lit(1)).alias('rows'),
            f.max(f.unix_micros(f.col(self.event_time))).alias('max'),
        ).first()
        with open(marker + '.tmp', 'w') as out:
            json.dump(
                {
                    'rows': int(stats['rows']),
                    'max_event_time': (None if stats['max'] is None else int(stats['max'])),
                },
                out,
            )
        os.replace(marker + '.tmp', marker)


class SparkStreamSource:
    """A streaming DataFrame's staged batches, stepped by Spark batch id: a
    ``source.StreamSource`` of the loop (module doc)."""

    def __init__(self, stage, engine, context, folder: str):
        self.stage = stage
        self._spec = json.loads(stage.native_payload)
        self.label = native.named(
            ', '.join(stage.labels), native.kind(stage.native_urn, self._spec)
        )
        self._engine = engine
        self._context = context
        self._folder = folder
        self._batches = os.path.join(folder, 'batches')
        self.clock = time.time()
        self.next_batch = 0  # the first Spark batch id not stepped
        self._durable = 0  # next_batch of the last record written before
        self._max_event: int | None = None
        self._watermark = MIN_TIMESTAMP
        self._exhausted = False
        self._drained = False  # ``drain``: the next step ends the source
        self._query: Any = None  # a StreamingQuery, classic or Spark Connect
        self._made = None
        self._taken = None

    # -- StreamSource ------------------------------------------------------
    @property
    def exhausted(self) -> bool:
        return self._exhausted

    def watermark(self, port: int) -> Timestamp:
        return self._watermark

    def checkpoint(self) -> dict:
        self._collect_garbage()
        return {
            'identity': self._spec['identity'],
            'next_batch': self.next_batch,
            'max_event_time': self._max_event,
            'drained': self._drained,
        }

    def backlog(self) -> tuple[dict, bool]:
        """What Spark's query staged and the loop has not read (batches and
        rows, from their markers), what the query is doing (its status
        message), and whether the stream has caught up: nothing staged is
        left and the query found no new data at its last look (``backlog``
        of the loop)."""
        batches = rows = 0
        n = self.next_batch
        while os.path.exists(self._marker(n)):
            batches += 1
            rows += int(self._stats(n).get('rows') or 0)
            n += 1
        if self._query is None:
            state, idle = ('stopped' if self._exhausted else 'not started'), self._exhausted
        elif not self._query.isActive:
            state, idle = 'ended', True
        else:
            status = self._query.status
            state = status.get('message', '?')
            idle = not status.get('isDataAvailable') and not status.get('isTriggerActive')
        return (
            {'staged_batches': batches, 'staged_rows': rows, 'spark_query': state},
            batches == 0 and idle,
        )

    def describe_position(self) -> str:
        """Where the source stands, for a person (``restart.describe``)."""
        if self._drained:
            return f'stopped at Spark batch {self.next_batch} (drained)'
        return f'next Spark batch {self.next_batch}'

    def restore(self, record: dict) -> None:
        if record.get('identity') != self._spec['identity']:
            raise specs.SparkInteropError(
                f'{self.label}: the checkpoint location holds the position of '
                f'another source ({record.get("identity")}), not of this one '
                f'({self._spec["identity"]}); use another --checkpoint_location '
                'for a changed source.'
            )
        self.next_batch = self._durable = int(record['next_batch'])
        self._max_event = record.get('max_event_time')
        self._drained = bool(record.get('drained'))
        self._watermark = self._event_watermark()
        self._made = self._taken = None

    def step_micro_batch(self, coalesce_elements: bool = False) -> list:
        """Takes the staged batches after the position (waiting up to
        ``POLL_SECONDS`` for one); their rows go to ``take_made`` as engine
        data made in Spark tasks, so the list returned is always empty."""
        self._made = None
        if self._drained:  # stops at its position: staged batches stay unread
            self.close()
            self._exhausted = True
            self._watermark = MAX_TIMESTAMP
            return []
        if self._query is None:
            self._start()
        ids = self._staged(POLL_SECONDS)
        if not ids and not self._active():
            ids = self._staged(0)  # staged just before the query ended
            if not ids:
                self._exhausted = True
                self._watermark = MAX_TIMESTAMP
        self.clock = max(self.clock, time.time())
        if not ids:
            return []
        stats = [self._stats(i) for i in ids]
        self.next_batch = ids[-1] + 1
        for s in stats:
            if s['max_event_time'] is not None:
                self._max_event = max(self._max_event or s['max_event_time'], s['max_event_time'])
        self._watermark = max(self._watermark, self._event_watermark())
        full = [i for i, s in zip(ids, stats) if s['rows']]
        if full:
            self._made = self._data(full)
        return []

    def take_made(self) -> Any:
        made, self._made = self._made, None
        return made

    def prefetch(self, coalesce_elements: bool = False, make=None) -> None:
        pass  # Spark's query stages ahead on its own

    def drain(self) -> None:
        """Stops at the current position (``source.StreamSource.drain``):
        the next step stops Spark's query and ends the source."""
        self._drained = True
        self._made = None

    def close(self) -> None:
        query, self._query = self._query, None
        if query is not None:
            try:
                query.stop()
            except Exception:  # a dead session has no query left to stop
                pass

    # -- Spark's side ------------------------------------------------------
    def _start(self) -> None:
        dataframe = specs._DATAFRAMES.get(self._spec['token'])
        if dataframe is None:
            raise specs.SparkInteropError(
                f'{self.label}: its streaming DataFrame lives in the process that '
                'built the pipeline; run the pipeline there.'
            )
        session = self._engine.spark_session()
        if dataframe.sparkSession is not session:
            raise specs.SparkInteropError(
                f'{self.label}: the streaming DataFrame belongs to another '
                "SparkSession than the runner's; give the runner that session "
                '(InProcessSparkRunner(spark=df.sparkSession)).'
            )
        self._own_folder()
        os.makedirs(self._batches, exist_ok=True)
        writer = dataframe.writeStream.foreachBatch(
            StageBatch(self._batches, self._spec['event_time'])
        ).option('checkpointLocation', os.path.join(self._folder, 'checkpoint'))
        trigger = self._spec['trigger']
        if trigger == AVAILABLE_NOW:
            writer = writer.trigger(availableNow=True)
        elif trigger:
            writer = writer.trigger(processingTime=trigger)
        try:
            self._query = writer.start()
        except Exception as e:
            raise specs.spark_error(f'{self.label}: starting its streaming query', e) from None

    def _own_folder(self) -> None:
        """Refuses a folder another source staged into (module doc)."""
        os.makedirs(self._folder, exist_ok=True)
        owner = os.path.join(self._folder, 'source.json')
        identity = self._spec['identity']
        if os.path.exists(owner):
            with open(owner) as f:
                theirs = json.load(f)
            if theirs != identity:
                raise specs.SparkInteropError(
                    f'{self.label}: {self._folder!r} holds the staged batches and '
                    f'Spark checkpoint of another source ({theirs}), not of this '
                    f'one ({identity}); use another --checkpoint_location.'
                )
            return
        with open(owner + '.tmp', 'w') as f:
            json.dump(identity, f)
        os.replace(owner + '.tmp', owner)

    def _active(self) -> bool:
        """Whether the query runs; raises its failure if it failed."""
        if self._query.isActive:
            return True
        error = self._query.exception()
        if error is not None:
            raise specs.SparkInteropError(
                f'{self.label}: its streaming query failed: {str(error).strip().splitlines()[0]}'
            )
        return False

    def _staged(self, wait: float) -> list[int]:
        """The consecutive staged batch ids from the position (waiting up to
        ``wait`` seconds for the first)."""
        start = time.monotonic()
        looked = start
        while True:
            ids: list[int] = []
            while len(ids) < MAX_BATCHES and os.path.exists(
                self._marker(self.next_batch + len(ids))
            ):
                ids.append(self.next_batch + len(ids))
            now = time.monotonic()
            if ids or now >= start + wait:
                return ids
            if now - looked >= 0.25:  # an RPC over Connect: not every look
                looked = now
                if not self._query.isActive:
                    return []  # the caller looks once more
            time.sleep(0.02)

    def _marker(self, batch_id: int) -> str:
        return os.path.join(self._batches, str(batch_id), MARKER)

    def _stats(self, batch_id: int) -> dict:
        with open(self._marker(batch_id)) as f:
            return json.load(f)

    def _event_watermark(self) -> Timestamp:
        if self._max_event is None:
            return MIN_TIMESTAMP
        return Timestamp(micros=self._max_event - self._spec['lateness_micros'])

    def _data(self, ids: list[int]) -> Any:
        """The staged batches' rows as engine data of the stage's outputs."""
        from beam_spark_inproc.planning import plan as p
        from beam_spark_inproc.transforms.convert import ToTimestampedRows

        schema = specs.decode_schema(self._spec['schema'])
        row_type = types.row_type(schema)
        names = tuple(f.name for f in schema)
        session = self._engine.spark_session()
        frame = session.read.parquet(*[os.path.join(self._batches, str(i)) for i in ids]).select(
            *names
        )
        source = self._engine.arrow_source(frame)
        datas = []
        for tag, port in enumerate(self.stage.outputs):
            if port.layout not in (p.CHUNKS, p.ELEMENTS):
                raise ValueError(
                    f'{self.label}: output layout {port.layout!r} '
                    'is not one a streaming read writes'
                )
            datas.append(
                self._engine.map_stage(
                    source,
                    ToTimestampedRows(
                        self._context.coders[port.coder_id],
                        row_type,
                        names,
                        self._spec['event_time'],
                        self.label,
                        port.layout == p.ELEMENTS,
                        tag,
                    ),
                )
            )
        return datas[0] if len(datas) == 1 else self._engine.union(datas)

    def _collect_garbage(self) -> None:
        """Removes the staged batches the last written record had stepped
        past (a record newer than it is about to be written)."""
        for name in os.listdir(self._batches) if os.path.isdir(self._batches) else ():
            if name.isdigit() and int(name) < self._durable:
                shutil.rmtree(os.path.join(self._batches, name), ignore_errors=True)
        self._durable = self.next_batch
