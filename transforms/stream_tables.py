"""WriteToSpark into a catalog table in a stream: exactly once, by files.

A file-backed catalog table (a datasource table ``USING parquet``, ``orc`` or
``json``; managed or external; partitioned or not) is a folder of data files
and a catalog entry naming that folder, its format and its partition
columns. A stream appends each micro-batch into it with the path sink's
protocol (``stream_runtime.PathSink``: staged by Spark's commit protocol,
renamed into the folder, published by micro-batch id, files of an
unpublished micro-batch removed when the stream starts again), then tells
the catalog: ``REFRESH TABLE`` (readers' cached file listings), and for a
partitioned table ``ALTER TABLE ... RECOVER PARTITIONS`` (the catalog's
partitions, which readers of a partitioned table list instead of the
folder). Both are idempotent, so they run after every publish and once
when the sink starts (a driver that died between its published record and
them leaves nothing unseen).

**Resolved through the catalog** (``DESCRIBE TABLE EXTENDED``: its ``Type``,
``Provider``, ``Location`` and ``# Partition Information`` rows; views by
``catalog.getTable``), so it works the same on classic Spark and over Spark
Connect (``resolve``). While the pipeline is built (``WriteToSpark.expand``) the
table must exist, be such a table, and its columns must match the
PCollection's fields (``specs.target_schema``): else a SparkInteropError
naming the transform, before anything is written. When the stream runs, the
table is resolved again before the sink's first write (``target``: a table
dropped or changed since is refused then, still before writing), and
``stream_runtime`` makes the table's ``PathSink``: its folder, its format and
partition columns for the staged write, ``refresh`` after each publish.

Refused, with their reason: views, permanent, temporary or global temporary
(``specs.view_kind``: ``DESCRIBE`` says nothing of a temporary view); tables
whose format keeps its own transaction log (Delta, Iceberg, Hudi: renamed-in files would bypass the
log; Delta's idempotent appends by ``txnAppId``/``txnVersion`` need
delta-spark, which this runner does not bring); Hive serde tables and any
other provider; a location not on a file system the driver renames files on
(``planning.native_streaming``'s rule for paths).

The data files are written in the table's format with its partition
columns as folders (``col=value``), the columns in the table's order; the
table's own storage options are Spark's to apply on read.
"""

from __future__ import annotations

import dataclasses
import os
import urllib.parse

from beam_spark_inproc.transforms import specs

FILE_FORMATS = ('parquet', 'orc', 'json')


@dataclasses.dataclass(frozen=True)
class TableTarget:
    """A catalog table as a stream writes it: its folder, format and
    partition columns."""

    table: str
    location: str  # a local path
    format: str
    partition_by: tuple[str, ...]

    def as_spec(self) -> dict:
        return {
            'location': self.location,
            'format': self.format,
            'partition_by': list(self.partition_by),
        }

    def write_options(self) -> dict:
        """What a staged write of the table's files takes from the table."""
        return {'format': self.format, 'partition_by': list(self.partition_by)}


def describe(session, table: str, what: str) -> dict:
    """``DESCRIBE TABLE EXTENDED``'s detail rows by name, and the partition
    columns under ``partition_by``."""
    try:
        rows = [tuple(r) for r in session.sql(f'DESCRIBE TABLE EXTENDED {table}').collect()]
    except Exception as e:
        raise specs.spark_error(what, e) from None
    found: dict = {'partition_by': []}
    section = 'columns'
    for name, value, _ in rows:
        name = (name or '').strip()
        if name == '# Partition Information':
            section = 'partitions'
        elif name == '# Detailed Table Information':
            section = 'detail'
        elif not name or name.startswith('#'):
            if not name and section == 'partitions':
                section = 'columns'
        elif section == 'partitions':
            found['partition_by'].append(name)
        elif section == 'detail':
            found[name] = (value or '').strip()
    return found


def resolve(session, table: str, what: str) -> TableTarget:
    """The table as a stream writes it, or a SparkInteropError naming
    ``what`` saying why a stream cannot (the module doc)."""
    try:
        exists = session.catalog.tableExists(table)
    except Exception as e:
        raise specs.spark_error(what, e) from None
    if not exists:
        raise specs.SparkInteropError(
            f'{what}: table {table!r} does not exist. A stream appends to an '
            'existing table: create it first (CREATE TABLE ... USING parquet, '
            'with PARTITIONED BY if it has partitions), or write to path=.'
        )
    view = specs.view_kind(session, table)
    detail = describe(session, table, what)
    kind = detail.get('Type', '').upper()
    provider = detail.get('Provider', '').lower()
    if view is None and (kind == 'VIEW' or 'View Text' in detail):
        view = 'permanent'
    if view is not None:
        raise specs.SparkInteropError(
            f'{what}: {table!r} is a view ({view}); a stream appends to a table. '
            'Write to a parquet, orc or json table, or to path=.'
        )
    if provider in ('delta', 'iceberg', 'hudi'):
        raise specs.SparkInteropError(
            f'{what}: table {table!r} is a {provider} table, which keeps its own '
            "transaction log that the stream's file renames would bypass; "
            "exactly-once appends through its transactions (Delta's "
            'txnAppId/txnVersion) are not offered. Write to a parquet, orc or '
            'json table, or to path=.'
        )
    if provider not in FILE_FORMATS:
        raise specs.SparkInteropError(
            f'{what}: table {table!r} has provider {provider or "unknown"!r}; a '
            'stream appends exactly once to file-backed datasource tables '
            f'(USING {", ".join(FILE_FORMATS)}) by publishing files into their '
            'location.'
        )
    location = detail.get('Location', '')
    parsed = urllib.parse.urlparse(location)
    if not location or parsed.scheme not in ('', 'file'):
        raise specs.SparkInteropError(
            f'{what}: table {table!r} is at {location or "no location"!r}; a '
            'stream publishes each micro-batch by renaming files in the '
            "driver, on a file system it shares with Spark's executors (a "
            'local or mounted path).'
        )
    path = os.path.abspath(parsed.path if parsed.scheme else location)
    return TableTarget(table, path, provider, tuple(detail['partition_by']))


def check(session, spec: dict, arrow, what: str):
    """While building: the table resolved and its schema checked against
    the PCollection's; returns the schema to write (the table's)."""
    target = resolve(session, spec['table'], what)
    if spec['format'] and spec['format'].lower() != target.format:
        raise specs.SparkInteropError(
            f'{what}: format {spec["format"]!r} but table {spec["table"]!r} is '
            f'{target.format}; drop format= (the table says it).'
        )
    schema = specs.target_schema(session, spec, arrow, what)
    spec['table_target'] = target.as_spec()
    return schema


def target(session, spec: dict, label: str) -> TableTarget:
    """When the stream runs, before the sink's first write: the table of a
    WriteToSpark(table=) resolved again (refused if changed since the
    pipeline was built), its folder made if it is not there yet (an external
    table's, before its first write: RECOVER PARTITIONS fails without it)."""
    found = resolve(session, spec['table'], label)
    built = spec.get('table_target')
    if built and (built['format'], built['partition_by']) != (
        found.format,
        list(found.partition_by),
    ):
        raise specs.SparkInteropError(
            f'{label}: table {spec["table"]!r} changed since the pipeline was '
            f'built (format {built["format"]}, partitions '
            f'{built["partition_by"]}; now {found.format}, '
            f'{list(found.partition_by)}); build the pipeline again.'
        )
    os.makedirs(found.location, exist_ok=True)
    return found


def refresh(session, table: TableTarget, label: str) -> None:
    """The catalog sees the table's files: its partitions recovered (a
    partitioned table), its cached listing dropped."""
    try:
        if table.partition_by:
            session.sql(f'ALTER TABLE {table.table} RECOVER PARTITIONS')
        session.sql(f'REFRESH TABLE {table.table}')
    except Exception as e:
        # py4j's own text says only which call failed: the JVM's says why.
        raise specs.spark_error(
            f'{label}: refreshing {table.table}', getattr(e, 'java_exception', e)
        ) from None
