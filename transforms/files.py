"""Parquet files read by pyarrow inside the reading stage's task.

A ReadFromSpark of a DataFrame whose physical plan is a bare scan of local
Parquet files (``spark.read.parquet(path)``, a Parquet table, optionally a
plain column selection) does not need Spark's reader: handed over through
``mapInArrow``, Spark decodes the columnar Parquet batches into rows
(``ColumnarToRow``) and writes them back into Arrow for the Python worker, a
JVM cost per value that made ReadFromSpark slower than Beam's own
ReadFromParquet (docs/performance.md, "Where ReadFromSpark's time goes": 2M rows,
a no-op ``mapInArrow`` 6.7-7.2 s against 1.0-1.2 s for pyarrow in the task).

``file_units`` decides in the driver, conservatively: only a plan of
``[Project of plain columns] <- [ColumnarToRow] <- FileScan parquet`` with no
data, partition or pushed filters (read from ``DataFrame.explain``'s simple
mode, which both classic Spark and Connect print), ``file:`` input files
(``DataFrame.inputFiles``) whose footers have every column and cast to the
DataFrame's Arrow schema. Anything else (filters, partition columns, other
formats, remote file systems, schema drift) keeps Spark's reader. The files
(or, when there are fewer files than tasks, their row groups) are spread over
``parallelism`` tasks by size; ``ParquetFiles`` is the worker side: a task's
input is its number (a ``session.range`` with one row per partition), and it
reads its share with pyarrow, cast to the read's Arrow schema.

Not carried over from Spark's reader: its file-source options
(``ignoreCorruptFiles``, the datetime rebase of files written by Spark 2's legacy
calendar). The driver reads the footers, so over Connect the client must see the
files at the same paths (else Spark's reader reads them).

Imported by workers: only pyarrow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import re
from typing import Iterator
from typing import Optional
from urllib.parse import unquote
from urllib.parse import urlparse

import pyarrow as pa

# Rows per Arrow batch read from a file for element-wise consumers (Spark's own
# spark.sql.execution.arrow.maxRecordsPerBatch for the runner's sessions).
BATCH_ROWS = 10_000

_COLUMN = re.compile(r'^(?P<name>[A-Za-z_][A-Za-z0-9_]*)#\d+L?$')
_SCAN = re.compile(
    r'^(\*\(\d+\) )?FileScan parquet (\S+)?\[(?P<columns>[^\]]*)\] '
    r'Batched: \w+, DataFilters: \[\], Format: Parquet, Location: .*, '
    r'PartitionFilters: \[\], PushedFilters: \[\], ReadSchema: .*$'
)
_PROJECT = re.compile(r'^(\*\(\d+\) )?Project \[(?P<columns>[^\]]*)\]$')
_COLUMNAR_TO_ROW = re.compile(r'^(\*\(\d+\) )?ColumnarToRow$')


@dataclasses.dataclass(frozen=True)
class ParquetFiles:
    """Worker side: task ``i`` reads ``units[i]`` ((path, row groups or None)...)."""

    units: tuple[tuple[tuple[str, Optional[tuple[int, ...]]], ...], ...]
    schema: pa.Schema  # the read's Arrow schema (names in the DataFrame's order)

    def read(self, batch: pa.RecordBatch, whole: bool = False) -> Iterator[pa.RecordBatch]:
        """The data batches of the task numbers in ``batch`` (column 0):
        ``BATCH_ROWS`` rows each, or with ``whole`` one per row group (as
        Beam's ``ReadFromParquetBatched`` reads them; for batched consumers,
        ``batches.coalesced`` caps them)."""
        import pyarrow.parquet as pq

        names = self.schema.names
        for task in batch.column(0).to_pylist():
            for path, groups in self.units[task]:
                # Spark reads INT96 timestamps (its default) as micros as well.
                reader = pq.ParquetFile(path, coerce_int96_timestamp_unit='us')
                if whole:
                    for group in range(reader.num_row_groups) if groups is None else groups:
                        table = reader.read_row_group(group, columns=names, use_threads=False)
                        yield from (
                            table.select(names).cast(self.schema).combine_chunks().to_batches()
                        )
                    continue
                for data in reader.iter_batches(
                    batch_size=BATCH_ROWS, row_groups=groups, columns=names, use_threads=False
                ):
                    yield pa.RecordBatch.from_arrays(
                        [data.column(n) for n in names], names=names
                    ).cast(self.schema)


def file_units(dataframe, schema: pa.Schema, parallelism: int) -> Optional[ParquetFiles]:
    """The read's files for ``ParquetFiles``, or None: Spark's reader reads it."""
    try:
        if not _bare_parquet_scan(_plan(dataframe), schema.names):
            return None
        local = [_local_path(f) for f in dataframe.inputFiles()]
    except Exception:  # anything unexpected: Spark's reader, as before
        return None
    paths = [path for path in local if path is not None]
    if not paths or len(paths) < len(local):
        return None
    import pyarrow.parquet as pq

    sizes = {}
    try:
        for path in paths:
            footer = pq.read_schema(path)
            footer.empty_table().select(schema.names).cast(schema)  # raises if not
            sizes[path] = os.path.getsize(path)
    except Exception:
        return None
    units: list[tuple[str, Optional[tuple[int, ...]], int]] = [
        (path, None, sizes[path]) for path in paths
    ]
    if len(paths) < parallelism:  # fewer files than tasks: split by row groups
        units = []
        for path in paths:
            meta = pq.ParquetFile(path).metadata
            units.extend(
                (path, (g,), meta.row_group(g).total_byte_size) for g in range(meta.num_row_groups)
            )
    tasks: list[list] = [[] for _ in range(max(1, min(parallelism, len(units))))]
    loads = [0] * len(tasks)
    for path, groups, size in sorted(units, key=lambda u: -u[2]):
        i = loads.index(min(loads))
        tasks[i].append((path, groups))
        loads[i] += size
    return ParquetFiles(tuple(tuple(t) for t in tasks), schema)


def _plan(dataframe) -> str:
    """The physical plan, as ``explain(mode='simple')`` prints it (classic and
    Connect alike print with Python's print)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        dataframe.explain(mode='simple')
    return out.getvalue()


def _bare_parquet_scan(plan: str, names: list[str]) -> bool:
    lines = [
        line.strip().lstrip('+- ').strip()
        for line in plan.splitlines()
        if line.strip() and not line.startswith('==')
    ]
    if not lines:
        return False
    scan = _SCAN.match(lines[-1])
    if scan is None:
        return False
    middle = lines[:-1]
    if middle and _COLUMNAR_TO_ROW.match(middle[-1]):
        middle = middle[:-1]
    project = None
    if middle:
        project = _PROJECT.match(middle[0]) if len(middle) == 1 else None
        if project is None:
            return False
    columns = (project or scan).group('columns')
    parsed = [_COLUMN.match(c.strip()) for c in columns.split(',')]
    return [m.group('name') if m else None for m in parsed] == list(names)


def _local_path(uri: str) -> Optional[str]:
    parsed = urlparse(uri)
    if parsed.scheme not in ('file', '') or parsed.netloc not in ('', 'localhost'):
        return None
    return unquote(parsed.path)
