"""The command line without Beam: the runner's flags and the
``python -m beam_spark_inproc`` commands, as plain argparse.

Importing Beam takes seconds (10-20 s on a busy machine); answering
``--help`` should not. This module imports only the standard library, so
``python -m beam_spark_inproc --help``, each command's ``--help`` and
``run SCRIPT --help`` print at once; Beam is imported when a command runs.

* ``add_runner_options(parser)`` adds ``SparkRunnerOptions``' flags to any
  argparse parser: ``options.SparkRunnerOptions`` (a Beam
  ``PipelineOptions``) calls it, and so does the help here, so the flags are
  defined once.
* ``command_parser()`` is the top-level parser: ``run``, ``explain``,
  ``status``, ``drain``. ``status`` and ``drain`` parse their own arguments
  (``beam_spark_inproc.status``, ``execution.streaming.drain``; neither
  imports Beam); the parser here lists them with a line each.
"""

from __future__ import annotations

import argparse
import os

PROG = 'python -m beam_spark_inproc'
RUNNER_FLAG = '--runner=beam_spark_inproc.InProcessSparkRunner'
COMMANDS = ('run', 'explain', 'status', 'drain')

# Side inputs up to this size travel in the task's closure; larger ones as files.
INLINE_SIDE_INPUT_MB = 8.0
INLINE_SIDE_INPUT_BYTES = int(INLINE_SIDE_INPUT_MB * (1 << 20))
# Stages whose input and output are at most this many KB run in the driver
# (``execution.small``); the environment variable sets another default, 0 turns it
# off. A stage that grows past the limits is handed to Spark with its rows
# spread over every core, so a large pipeline starting from tiny data keeps
# Spark's parallelism and pays about what a Spark job costs in driver work
# (``small.spark_sooner``).
SMALL_DATA_KB = 64
SMALL_DATA_ENV = 'BEAM_SPARK_INPROC_SMALL_DATA_KB'
# Streaming: a micro-batch's driver-side source rows (TestStream events,
# rows a side-input gate releases) of at least this many KB are cut into one
# partition per core (``execution.streaming.loop``); 0: one partition. 256:
# the windowed count's 20,000-element events (~480 KB) gained, its
# 10,000-element ones (~240 KB) did not (docs/performance.md).
STREAM_SPREAD_KB = 256


def small_data_kb_default() -> float:
    value = os.environ.get(SMALL_DATA_ENV)
    try:
        return float(value) if value else SMALL_DATA_KB
    except ValueError:
        raise ValueError(
            f'{SMALL_DATA_ENV}={value!r} is not a number of KB '
            '(0 turns small data in the driver off).'
        ) from None


def add_runner_options(parser) -> None:
    """``SparkRunnerOptions``' flags, with their defaults and help."""
    parser.add_argument(
        '--spark_master',
        default=None,
        help='Spark master URL for a session the runner creates '
        "(default local[*]; under spark-submit, spark-submit's --master); "
        'ignored when a SparkSession is already active.',
    )
    parser.add_argument(
        '--spark_remote',
        default=None,
        help='Spark Connect URL (sc://host:port) to run on instead of a local session.',
    )
    parser.add_argument(
        '--spark_conf',
        action='append',
        default=None,
        metavar='KEY=VALUE',
        help='Spark configuration for a session the runner creates; '
        'repeatable, e.g. --spark_conf spark.executor.memory=2g.',
    )
    parser.add_argument(
        '--spark_parallelism',
        type=int,
        default=None,
        help='Number of partitions for shuffles (GroupByKey, Reshuffle); '
        'default: the cores of a local master, else '
        'spark.default.parallelism or spark.sql.shuffle.partitions.',
    )
    parser.add_argument(
        '--spark_py_files',
        action='append',
        default=None,
        metavar='FILE[,FILE...]',
        help="Extra .py, .zip or .egg files for the executors' Python "
        'path (repeatable or comma-separated). Modules the driver imports '
        'from outside site-packages (e.g. next to the pipeline script) '
        'are shipped without this.',
    )
    parser.add_argument(
        '--spark_inline_side_input_mb',
        type=float,
        default=INLINE_SIDE_INPUT_MB,
        help='Side inputs up to this size (MB) travel inside the tasks; '
        'larger ones are shipped once as files (Spark artifacts).',
    )
    parser.add_argument(
        '--spark_small_data_kb',
        type=float,
        default=small_data_kb_default(),
        help='Stages whose input and output hold at most this many KB '
        '(and 5000 rows) of Beam-encoded elements run in the driver, in '
        'the same worker code after the same pickling, without Spark '
        'jobs; larger data goes to Spark. 0: every stage runs on Spark. '
        f'Default: ${SMALL_DATA_ENV} if set, else {SMALL_DATA_KB:g}. '
        'See docs/performance.md.',
    )
    parser.add_argument(
        '--spark_profile_dir',
        default=None,
        metavar='DIR',
        help='Profile every bundle (cProfile) into this folder on the '
        "worker's machine: <stage>-<pid>-<n>.prof and .json with its "
        'wall and CPU seconds. Slows Python code down; for finding where '
        'time goes.',
    )
    parser.add_argument(
        '--inproc_debug',
        action='store_true',
        default=False,
        help='Run the same plan and worker code in this process, without '
        'Spark: breakpoint() in a DoFn stops here, exceptions keep their '
        'type. For debugging on small data.',
    )
    parser.add_argument(
        '--checkpoint_location',
        default=None,
        metavar='DIR',
        help='Streaming: the folder where state between micro-batches and '
        'a commit record per micro-batch are kept (Parquet, bucketed by '
        'key hash); default a private temporary folder removed at the end. '
        "A folder holding another pipeline's state is refused.",
    )
    parser.add_argument(
        '--spark_transform_name_mapping',
        default=None,
        metavar='JSON',
        help='Streaming, updating a stream: run changed code on a '
        '--checkpoint_location written by an earlier version. A JSON '
        'object of old transform label -> new label for each renamed '
        'transform that holds state (GroupByKey, stateful or splittable '
        'DoFn, side-input reader, source); a key also maps the labels '
        'under it ("Count" maps "Count/Group"); an empty new label drops '
        "that transform's state. Beam's --transform_name_mapping "
        "(Dataflow's) is read the same way. An update that would lose "
        'or misread state is refused before any Spark job, naming each '
        'transform and why (see docs/streaming.md).',
    )
    parser.add_argument(
        '--spark_stream_spread_kb',
        type=float,
        default=STREAM_SPREAD_KB,
        help="Streaming: a micro-batch's rows from the driver (a "
        "TestStream's events, main-input rows released by a side-input "
        'wait) holding at least this many KB of Beam-encoded elements are '
        'cut into consecutive parts, one Spark partition (task) per core '
        "of the run's parallelism, instead of one task (in a pipeline "
        "with a stateful DoFn too, each key's elements still in order, "
        'unless --spark_stream_stateful_whole); splittable DoFn '
        'residuals due together are always spread. 0: one partition. '
        f'Default {STREAM_SPREAD_KB}. See docs/performance.md.',
    )
    parser.add_argument(
        '--spark_stream_stateful_whole',
        action='store_true',
        default=False,
        help='Streaming, in a pipeline with a stateful DoFn: keep a '
        "micro-batch's rows from the driver in one partition (one task) "
        'whatever --spark_stream_spread_kb says. Spreading them gained '
        'on an idle machine; on a busy cluster the extra tasks may cost '
        'more than they gain.',
    )
    parser.add_argument(
        '--spark_split_after_seconds',
        type=float,
        default=5.0,
        help='Runner-initiated splitting of splittable DoFns (e.g. file '
        'reads): a restriction still running after this many seconds is '
        "split with the SDK's try_split and its remainder spread over all "
        'partitions in a next round; 0 turns it off (and the initial '
        'split). A stage whose input the driver holds (small data in the '
        'driver, on by default) starts with its restrictions cut into one '
        'equal part per core instead, in one round (not under 1,024 units '
        'of restriction size per core, e.g. bytes of a file).',
    )
    parser.add_argument(
        '--metrics_sink',
        action='append',
        default=None,
        metavar='URL',
        help="Push the pipeline's metrics (committed and attempted) while "
        'it runs and when it ends, to http://host:port/path (POST of JSON), '
        'graphite://host:port[/prefix] (Graphite plaintext over TCP) or '
        'pushgateway://host:port[/job] (Prometheus Pushgateway; needs the '
        '[prometheus] extra). Repeatable. A failing sink never fails the '
        'pipeline (see docs/metrics.md).',
    )
    parser.add_argument(
        '--metrics_push_period',
        type=float,
        default=5.0,
        metavar='SECONDS',
        help='Push metrics at most once per this many seconds while the '
        'pipeline runs (after a Spark job or micro-batch); the final push '
        'at the end is always made.',
    )
    parser.add_argument(
        '--metrics_push_timeout',
        type=float,
        default=5.0,
        metavar='SECONDS',
        help='Give up on a metrics sink after this many seconds per push.',
    )


def runner_options_help(prog: str) -> str:
    """The runner's pipeline options with their help, as ``--help`` shows them."""
    parser = argparse.ArgumentParser(
        prog=prog,
        add_help=False,
        usage=f'{prog} [InProcessSparkRunner options]',
        description="InProcessSparkRunner's pipeline options:",
    )
    add_runner_options(parser)
    return parser.format_help()


def command_parser() -> argparse.ArgumentParser:
    """``python -m beam_spark_inproc {run,explain,status,drain} ...``."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description='Run, explain and watch Beam Python pipelines on '
        f'InProcessSparkRunner.\n{PROG} COMMAND --help: what COMMAND takes '
        f"({PROG} run --help: the runner's pipeline options).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest='command', metavar='{' + ','.join(COMMANDS) + '}')
    commands.required = True
    for name, line in (
        ('run', 'run SCRIPT on InProcessSparkRunner (adds --runner unless given)'),
        (
            'explain',
            "run SCRIPT up to its first pipeline's run(), then print the plan "
            '(fused stages, shuffles, side inputs, the transforms of each Spark '
            'step) instead of running it',
        ),
    ):
        sub = commands.add_parser(
            name,
            help=line,
            description=line[0].upper() + line[1:] + '.',
            epilog=runner_options_help(f'{PROG} {name} SCRIPT'),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.add_argument(
            'script', metavar='SCRIPT', help='a Python file that builds and runs a pipeline'
        )
        sub.add_argument(
            'args',
            metavar='ARGS',
            nargs=argparse.REMAINDER,
            help="arguments for the script (pipeline options); SCRIPT --help lists the runner's",
        )
    commands.add_parser(
        'status',
        add_help=False,
        help="a stream's progress from its checkpoint location, running or stopped "
        f'({PROG} status --help)',
    )
    commands.add_parser(
        'drain',
        add_help=False,
        help=f'drain the stream running on a checkpoint location ({PROG} drain --help)',
    )
    return parser
