"""The streaming loop's parts on their own: ``watermarks.Watermarks``,
``buckets.BucketTable``, ``micro_batch.MicroBatch``."""

from apache_beam.utils.timestamp import MAX_TIMESTAMP
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.timestamp import Timestamp

from beam_spark_inproc.execution.executor import wire
from beam_spark_inproc.execution.streaming.buckets import BucketTable
from beam_spark_inproc.execution.streaming.micro_batch import MicroBatch
from beam_spark_inproc.execution.streaming.watermarks import Watermarks
from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.protocol.buckets import STATE_BUCKETS
from beam_spark_inproc.protocol.state import Summary


def _stage(name, kind, reads=(), writes=()):
    return p.StagePlan(
        name=name,
        kind=kind,
        labels=(name,),
        inputs=tuple(p.InputPort('in', b, 'c') for b in reads),
        outputs=tuple(p.OutputPort('out', b, 'c') for b in writes),
        output_tags=tuple('tag' for _ in writes) if kind == p.TEST_STREAM_STAGE else (),
    )


class _Source:
    def __init__(self, wm):
        self.wm = wm

    def watermark(self, port):
        return self.wm


def _chain(holds):
    """source -> a -> b, each stage's output holding at ``holds``."""
    plan = p.SparkPlan(
        stages=(
            _stage('source', p.TEST_STREAM_STAGE, writes=[b's']),
            _stage('a', p.SDK_STAGE, reads=[b's'], writes=[b'a']),
            _stage('b', p.SDK_STAGE, reads=[b'a'], writes=[b'b']),
        ),
        components=b'',
    )
    source = _Source(Timestamp(10))
    reads, _ = wire(plan)
    return Watermarks(plan, reads, {0: source}, lambda i: holds.get(i, MAX_TIMESTAMP)), source


def test_a_watermark_step_cascades_through_every_stage_in_one_settle():
    holds = {1: Timestamp(5)}
    watermarks, source = _chain(holds)
    before = watermarks.begin()
    watermarks.settle_source(0)
    watermarks.settle(2)  # settles its writer first
    assert watermarks.input == [Timestamp(10), Timestamp(10), Timestamp(5)]
    assert watermarks.output == [Timestamp(10), Timestamp(5), Timestamp(5)]
    assert watermarks.moved(before) and not watermarks.final
    assert watermarks.held() == ['source', 'a', 'b']
    # A hold released later never takes an output watermark back.
    holds[1] = Timestamp(1)
    watermarks.begin()
    watermarks.settle(1)
    assert watermarks.output[1] == Timestamp(5)
    assert watermarks.input[1] == Timestamp(10)


def test_a_task_keeps_the_input_watermark_it_was_given():
    watermarks, source = _chain({})
    watermarks.begin()
    watermarks.settle_source(0)
    assert watermarks.fix_next(2) == Timestamp(10)
    step = watermarks.step(2, 3.0)
    assert (
        step.input_watermark,
        step.next_input_watermark,
        step.output_watermark,
        step.processing_time,
    ) == (MIN_TIMESTAMP, Timestamp(10), MIN_TIMESTAMP, 3.0)
    source.wm = MAX_TIMESTAMP
    watermarks.settle(2)
    assert watermarks.input[2] == Timestamp(10)
    watermarks.begin()
    watermarks.settle_source(0)
    watermarks.settle(2)
    assert watermarks.final and not watermarks.held()


def test_due_buckets_and_holds():
    table = BucketTable(['s'])
    table.restore(
        0,
        None,
        {
            1: Summary(3, Timestamp(7), Timestamp(20), float('inf')),
            2: Summary(1, Timestamp(9), MAX_TIMESTAMP, 5.0),
        },
        {1: 'f1', 2: 'f2'},
    )
    assert table.counts == [STATE_BUCKETS]
    assert table.due(0, Timestamp(19), 4.0) == set()
    assert table.due(0, Timestamp(20), 4.0) == {1}
    assert table.due(0, Timestamp(0), 5.0) == {2}
    assert table.hold(0) == Timestamp(7)
    assert table.next_processing_timer(100.0) == 5.0
    files = table.files(0, 's', 'folder')
    assert (files.current, files.folder, files.buckets) == (
        ((1, 'f1'), (2, 'f2')),
        'folder',
        STATE_BUCKETS,
    )


def test_a_crowded_stage_splits_its_buckets(monkeypatch):
    monkeypatch.setenv('BEAM_SPARK_INPROC_KEYS_PER_BUCKET', '1')
    table = BucketTable(['s'])
    table.restore(0, 2, {1: Summary(4, Timestamp(7))}, {1: 'f1'})
    table.split(0)
    assert table.counts == [4]
    assert table.versions == [{1: 'f1', 3: 'f1'}]
    assert table.summaries[0][3] == Summary(2, Timestamp(7))


def test_control_rows_go_on_with_the_first_reader_only():
    batch = MicroBatch(now=0.0)
    assert batch.carry(1, keyed=False)
    assert not batch.carry(1, keyed=False)
    assert not batch.carry(2, keyed=True)
    batch.harvested.add(3)
    assert not batch.carry(3, keyed=False)
