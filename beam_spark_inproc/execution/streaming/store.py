"""Where a stream's state lives between micro-batches: the checkpoint location.

Layout under ``--checkpoint_location`` (default: a private temporary folder,
removed when the pipeline ends)::

    pipeline.json              which pipeline owns the folder (stage names and
                               transforms); another pipeline is refused
    state/stage-S/mb-N/        Parquet written by the engine in micro-batch N:
                               the state rows (key, data, bucket) of the buckets
                               stage S touched in N, and only those
    commits/N.json             the commit record of micro-batch N: watermarks,
                               source positions, clock, and for each stage and
                               bucket the folder holding its current version
                               and its summary (keys, hold, earliest timers)

A bucket is ``crc32(key) % STATE_BUCKETS`` (``worker.streaming``). A micro-batch
reads the current versions of the buckets its input touches or whose timers are
due, and writes new versions of those buckets only: state I/O grows with the
keys touched, not the keys held. The commit record is written last (write to a
temporary name, then rename), so a reader sees whole micro-batches only.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile

from beam_spark_inproc.planning import plan as p


class CheckpointOwnedError(ValueError):
    """The checkpoint location holds another pipeline's state."""


def fingerprint(plan: p.SparkPlan) -> list:
    return [[stage.name, list(stage.labels)] for stage in plan.stages]


class CheckpointStore:
    def __init__(self, plan: p.SparkPlan, location: str | None):
        self.temporary = not location
        self.root = os.path.abspath(
            location or tempfile.mkdtemp(prefix='beam-spark-stream-'))
        os.makedirs(self.root, exist_ok=True)
        owner = os.path.join(self.root, 'pipeline.json')
        mine = {'stages': fingerprint(plan)}
        if os.path.exists(owner):
            with open(owner) as f:
                theirs = json.load(f)
            if theirs != mine:
                raise CheckpointOwnedError(
                    f'--checkpoint_location {self.root!r} holds the state of '
                    'another pipeline (its stages differ from this one\'s); '
                    'nothing was overwritten. Give this pipeline its own '
                    'checkpoint location.')
            if os.listdir(os.path.join(self.root, 'commits')):
                raise CheckpointOwnedError(
                    f'--checkpoint_location {self.root!r} already holds '
                    'committed micro-batches of this pipeline; restarting from '
                    'them is not supported yet (issue #13), and they are not '
                    'overwritten. Remove the folder or give another location.')
        else:
            self._write_json(owner, mine)
        os.makedirs(os.path.join(self.root, 'commits'), exist_ok=True)

    def state_path(self, stage: int, micro_batch: int) -> str:
        return os.path.join(self.root, 'state', f'stage-{stage}',
                            f'mb-{micro_batch}')

    def commit(self, micro_batch: int, record: dict) -> None:
        self._write_json(
            os.path.join(self.root, 'commits', f'{micro_batch}.json'), record)

    def commits(self) -> list[int]:
        return sorted(int(name[:-5]) for name in os.listdir(
            os.path.join(self.root, 'commits')) if name.endswith('.json'))

    def read_commit(self, micro_batch: int) -> dict:
        with open(os.path.join(self.root, 'commits', f'{micro_batch}.json')) as f:
            return json.load(f)

    def close(self) -> None:
        if self.temporary:
            shutil.rmtree(self.root, ignore_errors=True)

    @staticmethod
    def _write_json(path: str, record) -> None:
        tmp = path + '.tmp'
        with open(tmp, 'w') as f:
            json.dump(record, f, sort_keys=True)
        os.replace(tmp, path)
