"""SparkRunnerOptions: the runner's command-line flags, as Beam PipelineOptions."""

from __future__ import annotations

import os

from apache_beam.options.pipeline_options import PipelineOptions

from beam_spark_inproc import flags
from beam_spark_inproc.flags import INLINE_SIDE_INPUT_BYTES as INLINE_SIDE_INPUT_BYTES
from beam_spark_inproc.flags import INLINE_SIDE_INPUT_MB as INLINE_SIDE_INPUT_MB
from beam_spark_inproc.flags import SMALL_DATA_ENV as SMALL_DATA_ENV
from beam_spark_inproc.flags import SMALL_DATA_KB as SMALL_DATA_KB
from beam_spark_inproc.flags import STREAM_SPREAD_KB as STREAM_SPREAD_KB
from beam_spark_inproc.flags import small_data_kb_default as small_data_kb_default


class SparkRunnerOptions(PipelineOptions):
    """The runner's pipeline options (defined in ``flags``, which imports no Beam)."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        flags.add_runner_options(parser)


def py_files(entries: list[str] | None) -> tuple[str, ...]:
    """``['a.py,b.zip', 'c.py']`` -> ``('a.py', 'b.zip', 'c.py')``, all files."""
    names = tuple(
        name.strip() for entry in entries or [] for name in entry.split(',') if name.strip()
    )
    for name in names:
        if not os.path.isfile(name):
            raise ValueError(
                f'--spark_py_files: {name!r} is not a file (give .py, .zip or '
                '.egg files, comma-separated or with the flag repeated).'
            )
    return names


def parse_conf(entries: list[str] | None) -> dict[str, str]:
    """``['k=v', ...]`` -> ``{'k': 'v'}``, naming the bad entry if one is malformed."""
    conf = {}
    for entry in entries or []:
        key, sep, value = entry.partition('=')
        if not sep or not key.strip():
            raise ValueError(
                f'--spark_conf expects KEY=VALUE (e.g. spark.executor.memory=2g), got {entry!r}.'
            )
        conf[key.strip()] = value.strip()
    return conf
