"""Restart from the checkpoint: a driver killed mid-micro-batch and
run again resumes from the last commit record; output files and committed
metrics equal a fault-free run's (nothing lost, nothing doubled); leftovers of
an uncommitted micro-batch (state without a commit record, a torn commit file)
are ignored and removed.

The driver is a subprocess (``restart_pipeline``) that SIGKILLs itself in the
middle of a micro-batch, after the files of window [20, 30) were moved into
the output folder and before the micro-batch's commit record was written.
"""

from __future__ import annotations

import json
import os
import pickle
import pickletools
import signal
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.execution.streaming.store import CheckpointStore
from beam_spark_inproc.execution.streaming.store import describe_changes
from beam_spark_inproc.execution.streaming.store import stage_key
from beam_spark_inproc.protocol.buckets import MAX_BUCKETS
from tests.streaming import restart_pipeline

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _driver(
    out: str, checkpoint: str, marker: str, seed: int, *flags: str, env: dict | None = None
):
    # Hash seeds 1 and 3 fuse this pipeline into differently named and ordered
    # stages (Beam's fusion iterates sets): the restart must match them.
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONHASHSEED=str(seed), **(env or {}))
    return subprocess.run(
        [
            sys.executable,
            '-m',
            'tests.streaming.restart_pipeline',
            out,
            checkpoint,
            '--kill',
            marker,
            *flags,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _by_window(files: dict) -> dict:
    """Lines per window (file names are '<prefix>-<window>-<i>-of-<n>.txt')."""
    found: dict = {}
    for name, lines in files.items():
        found.setdefault(name.rsplit('-', 3)[0], []).extend(lines)
    return {w: sorted(lines) for w, lines in found.items()}


@pytest.fixture(scope='module')
def fault_free(tmp_path_factory):
    base = tmp_path_factory.mktemp('fault-free')
    counters = restart_pipeline.run(
        InProcessSparkRunner(debug=True), str(base / 'out'), str(base / 'ck')
    )
    files = restart_pipeline.outputs(str(base / 'out'))
    assert counters == {'elements': restart_pipeline.STEPS * restart_pipeline.PER_STEP}
    assert len(_by_window(files)) == 7  # windows [0, 10) .. [60, 70)
    return files, counters


def _package_classes(checkpoint: str) -> set[str]:
    """The modules of this package that the pickles in a checkpoint name: the
    driver's state files and the state buckets' values. None, so that a
    checkpoint outlives the package's modules moving (it holds Beam's and
    Python's types only: windows, timestamps, bytes, numbers)."""
    found = set()

    def scan(data: bytes) -> None:
        if not data.startswith(b'\x80'):
            return  # a coder's bytes, not a pickle
        strings = []
        for op, arg, _ in pickletools.genops(data):
            if op.name == 'GLOBAL':
                strings.append(arg.split(' ')[0])
            elif isinstance(arg, str):
                strings.append(arg)
        found.update(s for s in strings if s.startswith('beam_spark_inproc'))

    scanned = 0
    for folder, _, names in os.walk(checkpoint):
        for name in names:
            path = os.path.join(folder, name)
            if name.endswith('.pickle'):
                with open(path, 'rb') as f:
                    scan(f.read())
            elif name.endswith('.parquet'):
                for column in pq.read_table(path).columns:
                    if pa.types.is_binary(column.type):
                        for value in column.to_pylist():
                            scan(value or b'')
            else:
                continue
            scanned += 1
    assert scanned, checkpoint
    return found


def _tear(checkpoint: str) -> None:
    """Makes the newest micro-batch half-written: a torn commit record after
    the last whole one, a temporary record, and state without a record."""
    commits = os.path.join(checkpoint, 'commits')
    last = max(int(n[:-5]) for n in os.listdir(commits) if n.endswith('.json'))
    with open(os.path.join(commits, f'{last}.json')) as f:
        text = f.read()
    with open(os.path.join(commits, f'{last + 1}.json'), 'w') as f:
        f.write(text[: len(text) // 2])
    with open(os.path.join(commits, f'{last + 2}.json.tmp'), 'w') as f:
        f.write(text)
    stray = os.path.join(checkpoint, 'state', 'stage-0', f'mb-{last + 1}')
    os.makedirs(stray)
    with open(os.path.join(stray, 'part-0.parquet'), 'wb') as f:
        f.write(b'PAR1 half')


@pytest.mark.parametrize('tear', [False, True], ids=['killed', 'killed_and_torn'])
def test_driver_killed_mid_micro_batch_then_restarted(tmp_path, fault_free, tear):
    out, checkpoint = str(tmp_path / 'out'), str(tmp_path / 'ck')
    marker = str(tmp_path / 'killed')
    first = _driver(out, checkpoint, marker, 1)
    assert first.returncode == -signal.SIGKILL, first.stderr[-3000:]
    assert os.path.exists(marker)
    partial = restart_pipeline.outputs(out)
    assert partial and len(partial) < len(fault_free[0])  # window [20, 30) is out
    assert any('T00:00:20-' in name for name in partial)
    assert _package_classes(checkpoint) == set()
    if tear:
        _tear(checkpoint)
    second = _driver(out, checkpoint, marker, 3)
    assert second.returncode == 0, second.stderr[-3000:]
    files, counters = fault_free
    got = restart_pipeline.outputs(out)
    assert sorted(got) == sorted(files)  # the same files, none doubled
    assert _by_window(got) == _by_window(files)
    assert json.loads(second.stdout.strip().splitlines()[-1]) == counters
    leftovers = [
        n for n in os.listdir(os.path.join(checkpoint, 'commits')) if not n.endswith('.json')
    ]
    assert leftovers == []
    # Beam's temporary files: the committed ones were moved by their panes,
    # the dead micro-batch's removed on restart (a fault-free run leaves none).
    temporary = [os.path.join(d, n) for d, _, names in os.walk(out) for n in names if '.temp' in d]
    assert temporary == []


def test_a_moved_checkpoint_resumes(tmp_path, fault_free):
    """Commit records name state files relative to the checkpoint location:
    a checkpoint folder moved elsewhere after the driver was killed resumes
    there (the old folder is gone)."""
    out, checkpoint = str(tmp_path / 'out'), str(tmp_path / 'ck')
    marker = str(tmp_path / 'killed')
    first = _driver(out, checkpoint, marker, 1)
    assert first.returncode == -signal.SIGKILL, first.stderr[-3000:]
    store = CheckpointStore.__new__(CheckpointStore)
    store.root = checkpoint
    record = store.read_commit(store.commits()[-1])
    paths = [b['path'] for stage in record['stages'] for b in stage['buckets'].values()]
    assert paths and not any(os.path.isabs(path) for path in paths)
    os.rename(checkpoint, str(tmp_path / 'moved'))
    checkpoint = str(tmp_path / 'moved')
    second = _driver(out, checkpoint, marker, 3)
    assert second.returncode == 0, second.stderr[-3000:]
    files, counters = fault_free
    assert _by_window(restart_pipeline.outputs(out)) == _by_window(files)
    assert json.loads(second.stdout.strip().splitlines()[-1]) == counters


def test_restart_finds_the_buckets_after_they_split(tmp_path, fault_free):
    """With one key per bucket allowed, the keyed stages' buckets split in the
    first micro-batch (64 -> the maximum); the restarted driver takes the
    bucket count from the commit record and reads the same files."""
    out, checkpoint = str(tmp_path / 'out'), str(tmp_path / 'ck')
    marker = str(tmp_path / 'killed')
    env = {'BEAM_SPARK_INPROC_KEYS_PER_BUCKET': '0'}
    first = _driver(out, checkpoint, marker, 1, env=env)
    assert first.returncode == -signal.SIGKILL, first.stderr[-3000:]
    commits = os.path.join(checkpoint, 'commits')
    newest = max(int(n[:-5]) for n in os.listdir(commits) if n.endswith('.json'))
    with open(os.path.join(commits, f'{newest}.json')) as f:
        record = json.load(f)
    assert {s.get('state_buckets') for s in record['stages'] if s['buckets']} == {MAX_BUCKETS}
    second = _driver(out, checkpoint, marker, 3, env=env)
    assert second.returncode == 0, second.stderr[-3000:]
    files, counters = fault_free
    got = restart_pipeline.outputs(out)
    assert _by_window(got) == _by_window(files)
    assert json.loads(second.stdout.strip().splitlines()[-1]) == counters


def test_recover_removes_what_was_not_committed(tmp_path):
    class Plan:  # what CheckpointStore reads of a plan
        stages = [
            type('S', (), {'name': 'a', 'labels': ('A',)})(),
            type('S', (), {'name': 'b', 'labels': ('B',)})(),
        ]

    root = str(tmp_path / 'ck')
    store = CheckpointStore(Plan, root)
    assert store.resume is None
    for n in range(3):
        os.makedirs(store.state_path(1, n))
        store.commit(
            n,
            {
                'micro_batch': n,
                'stages': [{'name': 'b', 'buckets': {'5': {'path': store.state_path(1, n)}}}],
            },
        )
    # Only commits 1 and 2 are kept, and the folder only 0 referred to is gone.
    assert store.commits() == [1, 2]
    assert not os.path.exists(store.state_path(1, 0))
    os.makedirs(store.state_path(0, 3))  # micro-batch 3 wrote state, died
    with open(os.path.join(root, 'commits', '3.json'), 'w') as f:
        f.write('{"micro_batch": 3, "sta')  # torn
    again = CheckpointStore(Plan, root)
    assert again.resume['micro_batch'] == 2
    assert again.commits() == [1, 2]
    assert not os.path.exists(store.state_path(0, 3))
    assert os.path.exists(store.state_path(1, 2))


def test_records_with_absolute_paths_are_still_read(tmp_path):
    """Records written before paths were relative name absolute paths: they
    are read as they are, and the files they name are kept."""

    class Plan:  # what CheckpointStore reads of a plan
        stages = [type('S', (), {'name': 'a', 'labels': ('A',)})()]

    store = CheckpointStore(Plan, str(tmp_path / 'ck'))
    for n in range(2):  # 0 as an old driver wrote it, 1 as a new one does
        os.makedirs(store.state_path(0, n))
        path = store.state_path(0, n)
        store.commit(
            n,
            {
                'micro_batch': n,
                'stages': [
                    {
                        'name': 'a',
                        'buckets': {str(n): {'path': path if n == 0 else store.relative(path)}},
                    }
                ],
            },
        )
    assert store.relative(store.state_path(0, 1)) == os.path.join('state', 'stage-0', 'mb-1')
    assert all(os.path.exists(store.state_path(0, n)) for n in range(2))
    again = CheckpointStore(Plan, str(tmp_path / 'ck'))
    assert again.resume['micro_batch'] == 1
    for n in range(2):
        [bucket] = again.read_commit(n)['stages'][0]['buckets'].values()
        assert again.absolute(bucket['path']) == store.state_path(0, n)
        assert os.path.exists(store.state_path(0, n))


def test_unchanged_driver_state_is_written_once(tmp_path):
    """The driver's state is written when it changed; a commit record after
    an unchanged one names the file written before, which is kept while a
    retained record names it and removed after."""

    class Plan:  # what CheckpointStore reads of a plan
        stages = [type('S', (), {'name': 'a', 'labels': ('A',)})()]

    store = CheckpointStore(Plan, str(tmp_path / 'ck'))
    named = []
    for n, held in enumerate([b'x', b'x', b'x', b'x', b'y', b'y', b'y']):
        path = store.relative(store.write_driver_state(n, held))
        store.commit(n, {'micro_batch': n, 'stages': [], 'driver_state': path})
        named.append(path)
        assert os.path.exists(store.absolute(path))
    assert (
        named == [os.path.join('driver', '0.pickle')] * 4 + [os.path.join('driver', '4.pickle')] * 3
    )
    assert sorted(os.listdir(tmp_path / 'ck' / 'driver')) == ['4.pickle']
    with open(store.absolute(named[-1]), 'rb') as f:
        assert f.read() == b'y'


def test_describe_changes_names_the_transforms():
    old = [['s1', ['Read', 'Map']], ['s2', ['GroupByKey', 'Sum']]]
    assert describe_changes(old, [['s1', ['Read', 'Map']], ['s2', ['GroupByKey', 'Mean']]]) == (
        'transforms added: Mean; transforms removed: Sum'
    )
    refused = describe_changes(old, [['s1', ['Read']], ['s3', ['Map', 'GroupByKey', 'Sum']]])
    assert "stage 's1' (Read, Map) is gone" in refused
    assert "stage 's3' (Map, GroupByKey, Sum) is new" in refused


def test_stage_key_ignores_the_order_fusion_named_the_parts_in():
    assert (
        stage_key('((A/Read)+(ref_B))+(C/Write)')
        == stage_key('((ref_B)+(C/Write))+(A/Read)')
        == 'A/Read+C/Write+ref_B'
    )
    assert stage_key('ref_B') == 'ref_B'


@pytest.mark.parametrize('variant', ['side', 'sdf'])
def test_driver_held_state_survives_a_restart(tmp_path, variant):
    """A side input (main-input elements pushed back in the driver until their
    window's side value is ready) or a splittable DoFn (its residual and due
    time in the driver): the driver is killed mid-micro-batch and the stream
    run again: the output files and committed metrics equal a fault-free
    run's. The killed run's last commit record names the driver's state, and
    it held something (without restoring it, windows are missing)."""
    base = tmp_path / 'fault-free'
    counters = restart_pipeline.run(
        InProcessSparkRunner(debug=True), str(base / 'out'), str(base / 'ck'), variant=variant
    )
    files = restart_pipeline.outputs(str(base / 'out'))
    assert counters == {'elements': restart_pipeline.ELEMENTS[variant]}
    assert len(_by_window(files)) == 6  # windows [0, 10) .. [50, 60)
    out, checkpoint = str(tmp_path / 'out'), str(tmp_path / 'ck')
    marker = str(tmp_path / 'killed')
    first = _driver(out, checkpoint, marker, 1, '--variant', variant)
    assert first.returncode == -signal.SIGKILL, first.stderr[-3000:]
    partial = restart_pipeline.outputs(out)
    assert partial and len(_by_window(partial)) < 6
    store = CheckpointStore.__new__(CheckpointStore)
    store.root = checkpoint
    record = store.read_commit(store.commits()[-1])
    with open(store.absolute(record['driver_state']), 'rb') as f:
        held = pickle.load(f)
    if variant == 'side':
        [gate] = [kept['gate'] for kept in held.values()]
        assert gate['pending'] and gate['sides'][0]['chunks']
    else:
        [residuals] = [kept['residuals'] for kept in held.values()]
        assert len(residuals) == 1
    assert _package_classes(checkpoint) == set()
    second = _driver(out, checkpoint, marker, 3, '--variant', variant)
    assert second.returncode == 0, second.stderr[-3000:]
    got = restart_pipeline.outputs(out)
    assert _by_window(got) == _by_window(files)
    assert json.loads(second.stdout.strip().splitlines()[-1]) == counters


@pytest.mark.parametrize('variant', ['text', 'parquet'])
def test_file_sink_across_a_restart(tmp_path, variant):
    """Beam's WriteToText and WriteToParquet on unbounded input (windowed
    WriteImpl): the driver is killed mid-stream, the stream run again from its
    checkpoint: the same files with the same records as a fault-free run,
    none twice, none missing, and exact committed metrics."""
    base = tmp_path / 'fault-free'
    os.makedirs(base / 'out')
    counters = restart_pipeline.run(
        InProcessSparkRunner(debug=True), str(base / 'out'), str(base / 'ck'), variant=variant
    )
    files = restart_pipeline.outputs(str(base / 'out'))
    assert counters == {'elements': restart_pipeline.ELEMENTS[variant]}
    # every element once, across the windows' files
    assert sum(map(len, files.values())) == restart_pipeline.ELEMENTS[variant]
    assert len(files) == 6  # one file per window [0, 10) .. [50, 60)
    out, checkpoint = str(tmp_path / 'out'), str(tmp_path / 'ck')
    os.makedirs(out)
    marker = str(tmp_path / 'killed')
    first = _driver(out, checkpoint, marker, 1, '--variant', variant)
    assert first.returncode == -signal.SIGKILL, first.stderr[-3000:]
    assert 0 < len(restart_pipeline.outputs(out)) < 6  # killed mid-stream
    second = _driver(out, checkpoint, marker, 3, '--variant', variant)
    assert second.returncode == 0, second.stderr[-3000:]
    assert restart_pipeline.outputs(out) == files
    assert json.loads(second.stdout.strip().splitlines()[-1]) == counters


def test_files_of_attempts_not_committed_are_collected(tmp_path):
    """A state folder holds a file per task attempt; only the committed
    attempt's is named by the commit record. The others (a failed or
    speculative attempt's) go at the next commit, or at once on restart."""

    class Plan:
        stages = [type('S', (), {'name': 'a', 'labels': ('A',)})()]

    root = str(tmp_path / 'ck')
    store = CheckpointStore(Plan, root)

    def write(n: int, *names: str) -> list[str]:
        folder = store.state_path(0, n)
        os.makedirs(folder, exist_ok=True)
        for name in names:
            open(os.path.join(folder, name), 'wb').close()
        return [os.path.join(folder, name) for name in names]

    def record(n: int, path: str) -> dict:
        return {'micro_batch': n, 'stages': [{'name': 'a', 'buckets': {'5': {'path': path}}}]}

    kept, dead = write(0, 'part-kept.parquet', 'part-dead.parquet')
    store.commit(0, record(0, kept))
    # Micro-batch 0's own folder waits: an abandoned attempt may still write.
    assert os.path.exists(dead)
    newer, dead1 = write(1, 'part-new.parquet', 'part-dead1.parquet')
    store.commit(
        1,
        {
            'micro_batch': 1,
            'stages': [{'name': 'a', 'buckets': {'5': {'path': kept}, '6': {'path': newer}}}],
        },
    )
    assert os.path.exists(kept) and not os.path.exists(dead)
    assert os.path.exists(dead1)  # micro-batch 1's folder: the next commit's
    again = CheckpointStore(Plan, root)  # restart: every attempt is dead
    assert again.resume['micro_batch'] == 1
    assert sorted(os.listdir(store.state_path(0, 1))) == ['part-new.parquet']
    assert sorted(os.listdir(store.state_path(0, 0))) == ['part-kept.parquet']
