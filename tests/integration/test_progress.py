"""Beam-level progress: Spark job descriptions and the progress log."""

from __future__ import annotations

import logging
import re

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.execution.progress import stage_ranges


def _side_input_pipeline(p):
    side = p | 'Side' >> beam.Create([('a', 1), ('b', 2)])
    main = (
        p
        | 'Main' >> beam.Create(list(range(100)))
        | 'Key' >> beam.Map(lambda x, d: (x % 2, d['a']), d=beam.pvalue.AsDict(side))
        | 'Group' >> beam.GroupByKey()
        | 'Sizes' >> beam.MapTuple(lambda k, vs: (k, len(vs)))
    )
    assert_that(main, equal_to([(0, 50), (1, 50)]))


def _job_descriptions(spark) -> list[str]:
    """Descriptions of the jobs Spark's status store knows, oldest first."""
    store = spark.sparkContext._jsc.sc().statusStore()
    jobs = store.jobsList(None)
    found = []
    for i in range(jobs.size()):
        job = jobs.apply(i)
        if job.description().isDefined():
            found.append((job.jobId(), job.description().get()))
    return [d for _, d in sorted(found)]


def test_stage_ranges():
    assert stage_ranges([0, 1, 2, 5, 7, 8]) == '1-3, 6, 8-9'
    assert stage_ranges([]) == ''


def test_spark_jobs_carry_beam_stage_names(spark):
    before = set(_job_descriptions(spark))
    # Spark's jobs are under test: every stage on Spark, none of these small
    # stages in the driver (``execution.small``).
    with beam.Pipeline(
        runner=InProcessSparkRunner(spark=spark),
        options=PipelineOptions(['--spark_small_data_kb=0']),
    ) as p:
        _side_input_pipeline(p)
    new = [d for d in _job_descriptions(spark) if d not in before]
    beam_jobs = [d for d in new if d.startswith('Beam pipeline ')]
    # One job collects the side input, one runs the rest.
    assert any('(side input' in d and 'Side' in d for d in beam_jobs), new
    assert any('(leaves)' in d and 'Key' in d for d in beam_jobs), new
    assert spark.sparkContext.getLocalProperty('spark.job.description') is None
    assert not [t for t in spark.getTags() if t.startswith('beam-pipeline-')]


def test_progress_is_logged_per_job(spark, caplog):
    with caplog.at_level(logging.INFO, logger='beam_spark_inproc.progress'):
        with beam.Pipeline(runner=InProcessSparkRunner(spark=spark)) as p:
            _side_input_pipeline(p)
    messages = [r.getMessage() for r in caplog.records if r.name == 'beam_spark_inproc.progress']
    done = [m for m in messages if ': done in ' in m]
    assert len(done) == len([m for m in messages if m.endswith(': started')]) >= 2
    n = re.search(r'of (\d+):', done[0]).group(1)
    assert all(f' of {n}: ' in m for m in done)
    # The elements each stage read: the 100 main elements appear in some stage.
    assert any(re.search(r'stage \d+: 100 elements', m) for m in done), done


def test_progress_is_silent_by_default(spark, caplog):
    with caplog.at_level(logging.WARNING):
        with beam.Pipeline(runner=InProcessSparkRunner(spark=spark)) as p:
            _side_input_pipeline(p)
    assert not [r for r in caplog.records if r.name.startswith('beam_spark_inproc')]


def _busy_square(x):
    return sum(i * i for i in range(200)) + x


def test_profile_dir_profiles_each_bundle(spark, tmp_path):
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_spark_inproc.worker import profiling

    options = PipelineOptions([f'--spark_profile_dir={tmp_path}'])
    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark), options=options) as p:
        out = (
            p
            | beam.Create(list(range(2000)), reshuffle=False)
            | 'Square' >> beam.Map(_busy_square)
            | beam.combiners.Count.Globally()
        )
        assert_that(out, equal_to([2000]))
    summary = profiling.summarize(str(tmp_path))
    assert summary['bundles'] >= 2  # the map stage and the combine after the shuffle
    assert len(list(tmp_path.glob('*.prof'))) == summary['bundles']
    assert summary['thread_cpu_seconds'] > 0
    seconds = summary['seconds_by_category']
    # _busy_square's generator is user code; Beam runs it through its operations.
    assert seconds[profiling.USER] > 0, seconds
    assert seconds['Beam bundle work (operations, DoFn invocation)'] > 0, seconds
    assert seconds['Arrow rows in/out (runner)'] > 0, seconds


def test_profile_category():
    from beam_spark_inproc.worker.profiling import category

    assert category(
        '~',
        "<method 'encode_to_stream' of 'apache_beam.coders.coder_impl.VarIntCoderImpl' objects>",
    ).startswith('encode/decode')
    assert category('/x/site-packages/pyarrow/table.py', 'f').startswith('Arrow')
    assert category('/home/u/pipeline.py', 'parse') == 'user code and builtins it calls'


def test_task_times_mark_each_task(tmp_path, monkeypatch):
    """``BEAM_SPARK_INPROC_TASK_TIMES``: one record per task, its marks in
    order (the debug engine runs the same tasks in this process)."""
    import json

    from beam_spark_inproc.worker import profiling

    monkeypatch.setenv(profiling.TASK_TIMES_ENV, str(tmp_path))
    with beam.Pipeline(runner=InProcessSparkRunner(debug=True)) as p:
        out = (
            p
            | beam.Create(list(range(500)))
            | 'Square' >> beam.Map(_busy_square)
            | beam.combiners.Count.Globally()
        )
        assert_that(out, equal_to([500]))
    records = [
        json.loads(line)
        for path in tmp_path.glob('tasks-*.jsonl')
        for line in path.read_text().splitlines()
    ]
    square = [r for r in records if 'Square' in r['stage']]
    assert square, [r['stage'] for r in records]
    for r in square:
        assert 0 <= r['first_batch'] <= r['processor_ready'] <= r['first_element']
        assert r['first_element'] <= r['bundle_done'] <= r['wall']
        assert r['bundle_thread_cpu'] > 0 and r['process_cpu'] > 0
        assert r['output_batches'] >= 1
    # The Square stage read every element once (plus any control rows).
    assert sum(r['input_rows'] for r in square) >= 500


def test_task_times_count_collections_during_and_between_tasks(tmp_path):
    """Each task's record counts the garbage collections (by generation,
    with their CPU) during the task and since the previous task's end
    (PySpark's ``gc.collect()`` after a task), and the frozen objects."""
    import gc
    import json

    from beam_spark_inproc.worker import profiling

    first = profiling.TaskTimes(str(tmp_path), 'stage-a')
    gc.collect(1)
    gc.collect(1)
    first.finish()
    gc.collect()  # as PySpark's daemon-forked worker after a task
    second = profiling.TaskTimes(str(tmp_path), 'stage-b')
    second.finish()
    records = [
        json.loads(line)
        for path in tmp_path.glob('tasks-*.jsonl')
        for line in path.read_text().splitlines()
    ]
    a, b = sorted(records, key=lambda r: r['start'])
    assert a['gc_during']['gc1'] >= 2 and a['gc_during']['gc1_cpu'] > 0
    assert b['gc_before']['gc2'] >= 1 and b['gc_before']['gc2_cpu'] > 0
    assert b['gc_during'].get('gc2', 0) == 0
    assert b['gc_frozen_at_start'] is None  # not a worker forked by PySpark
    assert b['rss_kb_at_start'] > 0
