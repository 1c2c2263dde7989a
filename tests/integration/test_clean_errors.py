"""What a user sees when something goes wrong, in a session the runner creates:
one error, and a session that keeps working afterwards.

Each test runs a fresh Python process (Spark's JVM writes its logs to that
process's stderr, which an in-process capture cannot see).
"""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]

ERRORS = """
import sys
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from beam_spark_inproc import InProcessSparkRunner, PipelineExecutionError

def boom(x):
    if x == 3:
        raise ValueError('bad element %s' % x)
    return x

def run(master, fn, out):
    options = PipelineOptions([f'--spark_master={master}',
                               '--spark_small_data_kb=0'])
    with beam.Pipeline(runner=InProcessSparkRunner(), options=options) as p:
        _ = (p | beam.Create([1, 2, 3]) | beam.Map(fn)
             | beam.combiners.ToList()
             | beam.Map(lambda xs, out=out: open(out, 'w').write(
                 repr(sorted(xs)))))

def listen(answer):
    # A server on 127.0.0.1 answering each connection's first bytes with
    # answer (None: silent, the connection left open).
    import socket, threading
    server = socket.socket()
    server.bind(('127.0.0.1', 0))
    server.listen()
    held = []

    def serve():
        while True:
            connection, _ = server.accept()
            held.append(connection)
            connection.recv(65536)
            if answer is not None:
                connection.sendall(answer)
                connection.close()

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1]

http = listen(b'HTTP/1.1 400 Bad Request\\r\\nContent-Length: 0\\r\\n\\r\\n')
silent = listen(None)
out = sys.argv[1]
for master in ['lokal[2]', 'spark://nohost.invalid:7077', 'spark://127.0.0.1:1',
               f'spark://127.0.0.1:{http}', f'spark://127.0.0.1:{silent}']:
    try:
        run(master, abs, out)
    except Exception as e:
        print('BAD MASTER', type(e).__name__, str(e).splitlines()[0], flush=True)
try:
    run('local[2]', boom, out)
except PipelineExecutionError as e:
    print('FAILED', e.transform, e.exception_type, flush=True)
run('local[2]', lambda x: x * 10, out)
print('AFTER', open(out).read(), flush=True)
run('local[2]', boom, out)
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    for name in ('SPARK_LOCAL_IP', 'PYSPARK_PYTHON', 'PYSPARK_DRIVER_PYTHON'):
        env.pop(name, None)  # as in a user's shell
    return env


def test_bad_masters_and_a_failing_dofn_print_one_error_each(tmp_path):
    script = tmp_path / 'errors_pipeline.py'
    script.write_text(ERRORS)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / 'out')],
        cwd=str(tmp_path),
        env=_env(),
        capture_output=True,
        text=True,
        timeout=400,
    )
    out, err = done.stdout.splitlines(), done.stderr
    bad = [line for line in out if line.startswith('BAD MASTER')]
    assert bad == [
        "BAD MASTER SparkMasterError --spark_master='lokal[2]' is not a Spark "
        'master URL (Spark: "Master must either be yarn or start with spark, '
        'k8s, or local"). Give one of: local, local[N], local[*], '
        'local[N,retries], local-cluster[workers,cores,memoryMB], '
        'spark://host:port[,host:port...], yarn or k8s://https://host:port.',
        bad[1],
        bad[2],
        bad[3],
        bad[4],
    ], out
    assert bad[1].startswith(
        'BAD MASTER SparkMasterError Cannot reach the Spark '
        "master 'spark://nohost.invalid:7077' (nohost.invalid:7077: "
    )
    assert bad[2].startswith(
        'BAD MASTER SparkMasterError Cannot reach the Spark '
        "master 'spark://127.0.0.1:1' (127.0.0.1:1: "
    )
    # Something listening that is not Spark: named with what it answered.
    assert re.fullmatch(
        r"BAD MASTER SparkMasterError --spark_master='spark://127\.0\.0\.1:\d+' is "
        r'not a Spark master: 127\.0\.0\.1:\d+: an HTTP server '
        r"\('HTTP/1\.1 400 Bad Request'\), in answer to Spark's RPC\. .*Nothing was started\.",
        bad[3],
    ), bad[3]
    assert 'accepted the connection but answered nothing within 5 s' in bad[4], bad[4]
    # The session the runner then made runs a failing pipeline and a good one.
    assert 'FAILED Map(boom) ValueError' in out, done
    assert 'AFTER [10, 20, 30]' in out, done
    # The last failure, uncaught: the runner's error once, with the user's
    # line; none of Spark's task-failure logs or the encoded record.
    assert done.returncode == 1
    assert err.count('PipelineExecutionError: ') == 1, err
    assert re.search(
        r"PipelineExecutionError: Beam transform 'Map\(boom\)' "
        r'failed \(stage \d+ of \d+\): ValueError: bad element 3',
        err,
    ), err
    assert "raise ValueError('bad element %s' % x)" in err, err
    for noise in (
        'ERROR Executor',
        'TaskSetManager',
        '[beam failure record',
        'PYTHON_EXCEPTION',
        'Py4JJavaError',
        'SQLSTATE',
        'at org.apache.spark',
    ):
        assert noise not in err, (noise, err)


INTERRUPTED = """
import os, sys, time, traceback
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from beam_spark_inproc import InProcessSparkRunner

started, out = sys.argv[1], sys.argv[2]

def slow(x):
    open(started, 'a').close()
    time.sleep(3600)
    return x

def run(fn):
    options = PipelineOptions(['--spark_master=local[2]', '--spark_small_data_kb=0'])
    with beam.Pipeline(runner=InProcessSparkRunner(), options=options) as p:
        _ = (p | beam.Create([1, 2, 3, 4]) | beam.Reshuffle() | beam.Map(fn)
             | beam.combiners.ToList()
             | beam.Map(lambda xs: open(out, 'w').write(repr(sorted(xs)))))

try:
    run(slow)
except KeyboardInterrupt as e:
    text = ''.join(traceback.format_exception(e))
    # The cancelled tasks have ended by the time the interrupt arrives: an
    # exit now would not stop the JVM under them.
    from pyspark.sql import SparkSession
    from beam_spark_inproc.spark.cancel import running_tasks
    running = running_tasks(SparkSession.builder.getOrCreate())
    print('INTERRUPTED', 'Py4J' in text, 'During handling' in text, running,
          flush=True)
# Both cores were busy with sleeping tasks: this runs only if they were cancelled.
run(lambda x: x + 1)
print('AFTER', open(out).read(), flush=True)
run(slow)
"""


def _interrupt_when(path: pathlib.Path, process: subprocess.Popen) -> None:
    """SIGINT once a task has started (the DoFn touched ``path``)."""
    while not path.exists():
        assert process.poll() is None, process.communicate()
        time.sleep(0.2)
    time.sleep(1)  # the task is in its DoFn: Ctrl-C lands during the Spark job
    path.unlink()
    process.send_signal(signal.SIGINT)


def test_ctrl_c_cancels_the_jobs_and_raises_keyboard_interrupt_alone(tmp_path):
    started = tmp_path / 'started'
    process = subprocess.Popen(
        [sys.executable, '-c', INTERRUPTED, str(started), str(tmp_path / 'out')],
        cwd=str(tmp_path),
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _interrupt_when(started, process)  # caught: the script goes on
        _interrupt_when(started, process)  # uncaught: the script ends
        stdout, stderr = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    out = stdout.splitlines()
    assert 'INTERRUPTED False False 0' in out, (stdout, stderr)
    assert 'AFTER [2, 3, 4, 5]' in out, (stdout, stderr)
    # Each Ctrl-C said at once what it cancels and that a second skips the
    # wait; the uncaught one ends the script with one line, and Python exits
    # as killed by SIGINT (130 in a shell).
    assert process.returncode == -signal.SIGINT, stderr
    said = [line for line in stderr.splitlines() if 'Ctrl-C' in line]
    assert len(said) == 3, stderr
    for line in said[:2]:
        assert re.fullmatch(
            r'Pipeline [0-9a-f]{8}: Ctrl-C: cancelling its Spark jobs, then waiting up to '
            r'15 s for their tasks to end; Ctrl-C again to skip the wait',
            line,
        ), stderr
    assert re.fullmatch(
        r'KeyboardInterrupt: pipeline [0-9a-f]{8} cancelled by Ctrl-C: its Spark jobs were '
        r'cancelled and their tasks ended',
        said[2],
    ), stderr
    assert said[2] == stderr.rstrip().splitlines()[-1], stderr
    for noise in ('Py4J', 'During handling', 'SPARK_JOB_CANCELLED', 'TaskSetManager', 'Traceback'):
        assert noise not in stderr, (noise, stderr)
