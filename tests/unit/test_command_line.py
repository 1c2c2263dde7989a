"""``python -m beam_spark_inproc``: one usage line naming every command, and
every ``--help`` answered without importing Beam (``flags``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from beam_spark_inproc import flags

# Runs the command line's main() in a fresh interpreter, then says whether
# Beam (or PySpark) was imported on the way.
_PROBE = """
import sys
from beam_spark_inproc.__main__ import main
try:
    code = main(sys.argv[1:])
except SystemExit as e:
    code = e.code
print('IMPORTED', sorted(m for m in ('apache_beam', 'pyspark') if m in sys.modules))
sys.exit(code or 0)
"""


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, '-c', _PROBE, *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    'args',
    [
        ['--help'],
        ['run', '--help'],
        ['explain', '--help'],
        ['status', '--help'],
        ['drain', '--help'],
        ['run', 'pipeline.py', '--help'],
        ['explain', 'pipeline.py', '--spark_master=local[2]', '--help'],
    ],
    ids=' '.join,
)
def test_help_imports_no_beam(args):
    done = _run(*args)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == 'IMPORTED []', done.stdout
    assert 'usage: python -m beam_spark_inproc' in done.stdout


def test_usage_names_every_command():
    done = _run('--help')
    usage = done.stdout.splitlines()[0]
    assert usage == 'usage: python -m beam_spark_inproc [-h] {run,explain,status,drain} ...'
    for command in flags.COMMANDS:
        assert f'\n    {command} ' in done.stdout, command


def test_no_command_and_a_missing_script_are_one_clear_error(tmp_path):
    done = _run()
    assert done.returncode == 2
    assert 'the following arguments are required: {run,explain,status,drain}' in done.stderr
    missing = str(tmp_path / 'nope.py')
    done = _run('run', missing)
    assert done.returncode == 2
    assert done.stderr.strip() == f'python -m beam_spark_inproc run: {missing}: no such file'
    assert 'IMPORTED []' in done.stdout


_PIPELINE = """
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

with beam.Pipeline(options=PipelineOptions()) as p:
    p | beam.Create([1, 2]) | beam.Map(print)
"""


def test_a_master_that_is_not_spark_is_one_line_from_run(tmp_path):
    """``run`` with a ``spark://`` master where an HTTP server listens: the
    runner's one-line error (no traceback, no JVM), exit status 1."""
    import http.server
    import threading

    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(('127.0.0.1', 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    script = tmp_path / 'pipeline.py'
    script.write_text(_PIPELINE)
    master = f'spark://127.0.0.1:{server.server_port}'
    try:
        done = _run('run', str(script), f'--spark_master={master}')
    finally:
        server.shutdown()
    assert done.returncode == 1, done.stderr
    assert 'Traceback' not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f'python -m beam_spark_inproc run: SparkMasterError: --spark_master={master!r} is '
        f'not a Spark master: 127.0.0.1:{server.server_port}: an HTTP server '
    ), last
    for noise in ('Py4J', 'at org.apache.spark', 'SparkContext'):
        assert noise not in done.stderr, done.stderr


_EXPLAINED = """
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

with beam.Pipeline(options=PipelineOptions()) as p:
    lines = p | 'Read lines' >> beam.io.ReadFromText({path!r})
    words = lines | 'Split words' >> beam.FlatMap(str.split)
    other = p | 'More words' >> beam.Create(['a', 'b'])
    grouped = (words, other) | 'Merge' >> beam.Flatten() | 'Pair' >> beam.Map(
        lambda w: (w, 1)
    ) | 'Group' >> beam.GroupByKey()
    again = p | 'Again' >> beam.Create([('a', 2)]) | 'Group again' >> beam.GroupByKey()
    totals = p | 'Total' >> beam.Create([10])
    _ = (
        (grouped, again)
        | 'Merge groups' >> beam.Flatten()
        | 'Share'
        >> beam.Map(lambda kv, t: (kv[0], len(kv[1]) / t), t=beam.pvalue.AsSingleton(totals))
        | 'Print' >> beam.Map(print)
    )
    # Stages of Beam's fusion that hold none of these transforms' own code.
    a = p | 'A' >> beam.Create([('k', 1)]) | 'Group A' >> beam.GroupByKey()
    b = p | 'B' >> beam.Create([('k', 2)]) | 'Group B' >> beam.GroupByKey()
    _ = (a, b) | 'Merge AB' >> beam.Flatten() | 'Group AB' >> beam.GroupByKey() | beam.Map(print)
    _ = totals | 'Look up' >> beam.Map(lambda t, d: (t, d), d=beam.pvalue.AsDict(a))
"""


def test_explain_names_what_the_user_labelled(tmp_path):
    """Read, GroupByKey, a side input and Flattens: every stage listed runs a
    transform of the pipeline, named by its label, and no id Beam made up
    (``ref_PCollection_...``, ``ref_AppliedPTransform_...``) is printed."""
    text = tmp_path / 'words.txt'
    text.write_text('a b\nc\n')
    script = tmp_path / 'pipeline.py'
    script.write_text(_EXPLAINED.format(path=str(text)))
    done = _run('explain', str(script))
    assert done.returncode == 0, done.stderr
    out = done.stdout.rsplit('IMPORTED', 1)[0]
    assert 'ref_PCollection' not in out and 'ref_AppliedPTransform' not in out, out
    stages = out.split('\n[')[1:]
    assert len(stages) == int(out.split(' stages;', 1)[0]), out
    for stage in stages:
        assert '\n    transforms: ' in stage, stage
    for label in ('Read lines', 'Split words', 'Group', 'Merge', 'Merge groups', 'Share'):
        assert f"'{label}'" in out or f' {label}' in out, label
    assert "side input 'python_side_input0' of 'Share': the output of 'Total'" in out, out
    assert "the shuffle of 'Group again'" in out, out
    assert '(internal) split of ' in out, out
    assert 'transforms: Group A (grouping), Merge AB (union)' in out, out
    assert 'transforms: Merge AB (union), Group AB (shuffle write)' in out, out
