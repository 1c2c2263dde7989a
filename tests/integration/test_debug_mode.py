"""Debug mode (``InProcessSparkRunner(debug=True)`` / ``--inproc_debug``).

The same plan and worker code run in the driver process without Spark, so:
``breakpoint()`` in a DoFn stops in the user's terminal, exceptions keep their
type, DoFns see the driver's module globals, and results equal those on Spark.
"""

from __future__ import annotations

import os
import subprocess
import sys

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.transforms import userstate
from apache_beam.transforms.window import FixedWindows
from apache_beam.transforms.window import TimestampedValue

from beam_spark_inproc import InProcessSparkRunner
from tests.integration.outputs import run_to_lines

# --- 1. breakpoint() in a DoFn ------------------------------------------------

_BREAKPOINT_SCRIPT = """
import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from beam_spark_inproc import InProcessSparkRunner


class TimesSeven(beam.DoFn):
    def process(self, element):
        x = element * 7
        breakpoint()
        yield x


out, mode = sys.argv[1], sys.argv[2]
if mode == 'option':
    runner, options = InProcessSparkRunner(), PipelineOptions(['--inproc_debug'])
else:
    runner, options = InProcessSparkRunner(debug=True), PipelineOptions()
with beam.Pipeline(runner=runner, options=options) as p:
    (p | beam.Create([6]) | beam.ParDo(TimesSeven()) | beam.Map(str)
     | beam.io.WriteToText(out, shard_name_template=''))
with open(out) as f:
    print('PIPELINE RESULT: %s' % f.read().strip())
"""


@pytest.mark.parametrize('mode', ['debug_arg', 'option'])
def test_breakpoint_in_dofn_stops_in_the_users_terminal(tmp_path, mode):
    script = tmp_path / 'pipeline.py'
    script.write_text(_BREAKPOINT_SCRIPT)
    env = dict(os.environ)
    env['PYTHONBREAKPOINT'] = 'pdb.set_trace'  # not whatever the test run set
    env.pop('PYTHONINSPECT', None)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / 'out.txt'), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=str(tmp_path),
        text=True,
    )
    try:
        # One element: pdb stops once; print the DoFn's local, then continue.
        output, _ = proc.communicate(input='p x\nc\n', timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        pytest.fail('pipeline with breakpoint() hung; output:\n%s' % output)
    assert proc.returncode == 0, output
    assert '(Pdb)' in output, output
    # pdb stops in the user's DoFn: on the line after breakpoint(), or on the
    # breakpoint() line itself from Python 3.13 (which enters it at the call).
    stop_line = '-> breakpoint()' if sys.version_info >= (3, 13) else '-> yield x'
    assert 'process()' in output and stop_line in output, output
    prompt_lines = [line for line in output.splitlines() if '(Pdb)' in line]
    assert any(line.split('(Pdb)', 1)[1].strip() == '42' for line in prompt_lines), (
        output
    )  # `p x` printed 6 * 7
    assert output.count('(Pdb)') == 2, output  # stopped exactly once
    assert 'PIPELINE RESULT: 42' in output, output


# --- 2. exceptions keep their type --------------------------------------------


class MyError(Exception):
    pass


def _explode(x):
    if x == 3:
        raise MyError('bad element %d' % x)
    return x


def test_exception_keeps_its_type_and_names_the_transform():
    with pytest.raises(MyError) as info:
        with beam.Pipeline(runner=InProcessSparkRunner(debug=True)) as p:
            p | beam.Create([1, 2, 3, 4]) | 'Explode' >> beam.Map(_explode)
    error = info.value
    assert type(error) is MyError
    assert 'bad element 3' in str(error)
    notes = getattr(error, '__notes__', [])
    text = str(error) + '\n' + '\n'.join(notes)
    assert "[while running 'Explode']" in text
    assert any('[beam stage]' in n and 'Explode' in n for n in notes), notes
    # The traceback reaches the user's own frame.
    assert any(entry.name == '_explode' for entry in info.traceback)


# --- 3. DoFns see the driver's module globals ---------------------------------

SEEN: dict = {}


class _RecordInGlobal(beam.DoFn):
    def process(self, element):
        SEEN[element] = element * 2
        yield element


def test_dofn_sees_the_drivers_module_globals():
    SEEN.clear()
    with beam.Pipeline(runner=InProcessSparkRunner(debug=True)) as p:
        p | beam.Create([1, 2, 3]) | beam.ParDo(_RecordInGlobal())
    assert SEEN == {1: 2, 2: 4, 3: 6}


def test_nested_function_sees_the_drivers_module_globals():
    """Pickled by value (with a copy of SEEN), rebound to this module's globals."""
    SEEN.clear()

    def record(element):
        SEEN[element] = element * 2
        return element

    with beam.Pipeline(runner=InProcessSparkRunner(debug=True)) as p:
        p | beam.Create([1, 2, 3]) | beam.Map(record)
    assert SEEN == {1: 2, 2: 4, 3: 6}


def test_nested_stateful_dofn_with_timer_runs():
    """A DoFn class pickled by value (nested here; a script's ``__main__`` is the
    same) has its methods rebound: its TimerSpec's ``on_timer`` callback must
    be the rebound method, or Beam's validation refuses the DoFn."""
    SEEN.clear()

    class CountThenFlush(beam.DoFn):
        COUNT = userstate.CombiningValueStateSpec('count', sum)
        FLUSH = userstate.TimerSpec('flush', userstate.TimeDomain.WATERMARK)

        def process(self, kv, count=beam.DoFn.StateParam(COUNT), flush=beam.DoFn.TimerParam(FLUSH)):
            count.add(kv[1])
            flush.set(100)

        @userstate.on_timer(FLUSH)
        def flushed(self, key=beam.DoFn.KeyParam, count=beam.DoFn.StateParam(COUNT)):
            SEEN[key] = count.read()

    with beam.Pipeline(runner=InProcessSparkRunner(debug=True)) as p:
        (p | beam.Create([('a', 1), ('a', 2), ('b', 5)]) | beam.ParDo(CountThenFlush()))
    assert SEEN == {'a': 3, 'b': 5}


_MAIN_SCRIPT = """
import apache_beam as beam
from beam_spark_inproc import InProcessSparkRunner

TOTALS = {}


def add(x):
    TOTALS[x] = TOTALS.get(x, 0) + 1
    return x


class Square(beam.DoFn):
    def process(self, x):
        TOTALS['squares'] = TOTALS.get('squares', 0) + x * x
        yield x


with beam.Pipeline(runner=InProcessSparkRunner(debug=True)) as p:
    (p | beam.Create([1, 2, 2, 3]) | beam.Map(add) | beam.ParDo(Square())
     | beam.Map(lambda x: TOTALS.__setitem__('last_lambda', True)))
print('TOTALS', sorted(TOTALS.items(), key=repr))
"""


def test_dofns_in_main_script_see_its_globals(tmp_path):
    """Functions and DoFns of ``__main__`` (pickled by value) write the script's
    own globals."""
    script = tmp_path / 'main_pipeline.py'
    script.write_text(_MAIN_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (
        "TOTALS [('last_lambda', True), ('squares', 18), (1, 1), (2, 2), (3, 1)]"
    ) in proc.stdout, proc.stdout


# --- 4. same results as on Spark ----------------------------------------------


def _fixed_windows_gbk(p):
    data = [(k, v) for k in 'ab' for v in range(25)]
    return (
        p
        | beam.Create(data)
        | beam.Map(lambda kv: TimestampedValue(kv, kv[1]))
        | beam.WindowInto(FixedWindows(10))
        | beam.GroupByKey()
        | beam.ParDo(_WithWindow())
    )


class _WithWindow(beam.DoFn):
    def process(self, kv, window=beam.DoFn.WindowParam):
        yield kv[0], int(window.start), sorted(kv[1])


def _side_input_as_dict(p):
    names = p | 'Names' >> beam.Create([(1, 'one'), (2, 'two'), (3, 'three')])
    return (
        p
        | 'Main' >> beam.Create([1, 2, 3, 4, 2])
        | beam.Map(lambda x, d: (x, d.get(x, '?')), d=beam.pvalue.AsDict(names))
    )


def _combine_per_key(p):
    return p | beam.Create([(k, v) for k in 'xyz' for v in range(ord(k))]) | beam.CombinePerKey(sum)


class _BufferUntilTimer(beam.DoFn):
    """Buffers per key, emits sorted buffer and count when the timer fires."""

    BAG = userstate.BagStateSpec('bag', VarIntCoder())
    COUNT = userstate.CombiningValueStateSpec('count', sum)
    FLUSH = userstate.TimerSpec('flush', userstate.TimeDomain.WATERMARK)

    def process(
        self,
        kv,
        bag=beam.DoFn.StateParam(BAG),
        count=beam.DoFn.StateParam(COUNT),
        flush=beam.DoFn.TimerParam(FLUSH),
    ):
        bag.add(kv[1])
        count.add(1)
        flush.set(1000)

    @userstate.on_timer(FLUSH)
    def on_flush(
        self,
        key=beam.DoFn.KeyParam,
        ts=beam.DoFn.TimestampParam,
        bag=beam.DoFn.StateParam(BAG),
        count=beam.DoFn.StateParam(COUNT),
    ):
        yield key, ts.micros // 10**6, count.read(), sorted(bag.read())
        bag.clear()


def _stateful_with_timer(p):
    return (
        p | beam.Create([(k, v) for k in 'pq' for v in range(5)]) | beam.ParDo(_BufferUntilTimer())
    )


_EXPECTED = {
    'fixed_windows_gbk': sorted(
        repr((k, start, list(range(start, min(start + 10, 25)))))
        for k in 'ab'
        for start in (0, 10, 20)
    ),
    'side_input_as_dict': sorted(
        repr(t) for t in [(1, 'one'), (2, 'two'), (3, 'three'), (4, '?'), (2, 'two')]
    ),
    'combine_per_key': sorted(repr((k, sum(range(ord(k))))) for k in 'xyz'),
    'stateful_with_timer': sorted(repr((k, 1000, 5, [0, 1, 2, 3, 4])) for k in 'pq'),
}


@pytest.mark.parametrize(
    'name, build',
    [
        ('fixed_windows_gbk', _fixed_windows_gbk),
        ('side_input_as_dict', _side_input_as_dict),
        ('combine_per_key', _combine_per_key),
        ('stateful_with_timer', _stateful_with_timer),
    ],
)
def test_debug_results_equal_spark_results(spark, tmp_path, name, build):
    debug = run_to_lines(InProcessSparkRunner(debug=True), build, str(tmp_path / 'debug'))
    on_spark = run_to_lines(InProcessSparkRunner(spark=spark), build, str(tmp_path / 'spark'))
    assert debug == on_spark
    assert debug == _EXPECTED[name]
