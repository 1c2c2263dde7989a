"""Where a stream's state lives between micro-batches: the checkpoint location.

Layout under ``--checkpoint_location`` (default: a private temporary folder,
removed when the pipeline ends)::

    pipeline.json              which pipeline owns the folder: its stages and
                               transforms, those holding state with their
                               coders (``update``); a pipeline that cannot
                               take that state over is refused; the stream's
                               id (``stream``: the same on every run here)
    sinks.json                 file sinks' temporary folders of every run
                               (``file_sinks``: a restart removes what
                               uncommitted micro-batches wrote there)
    state/stage-S/mb-N/        Parquet files written by stage S's tasks in
                               micro-batch N (``worker.streaming.state_io``): the
                               state rows of the buckets S touched in N, only
                               those, a file per task attempt (only the
                               committed attempt's files are referenced)
    driver/N.pickle            what the driver holds for stages after micro-batch
                               N (side-input values, pushed-back elements,
                               splittable DoFns' residuals; ``restart``),
                               written before commit N, which names it (or
                               names an earlier one when nothing changed)
    side-inputs/               side inputs too large to travel in a task
                               (``--spark_inline_side_input_mb``), written by
                               the driver when their value changes and read by
                               the workers; removed after the commit of a
                               micro-batch that no longer reads them, and all
                               at a restart (the driver state holds the values)
    drain-request.json         a drain asked for by ``python -m beam_spark_inproc
                               drain`` (``drain``), removed once a commit
                               record carries the drain
    commits/N.json             the commit record of micro-batch N: watermarks,
                               source positions, clock, committed metrics, and
                               for each stage and bucket the file holding its
                               current version and its summary (keys, hold,
                               earliest timers)

Paths in commit records (state files, the driver state) are relative to the
checkpoint location, so a folder moved or copied elsewhere resumes; records
written before held absolute paths and are read as they are (``absolute``).

A bucket is ``crc32(key) % buckets`` (``protocol.buckets.bucket_count``). A micro-batch
reads the current versions of the buckets its input touches or whose timers are
due, and writes new versions of those buckets only: state I/O grows with the
keys touched, not the keys held. The commit record is written last (write to a
temporary name, then rename), so a reader sees whole micro-batches only.

**Restart.** The same pipeline run again on the same folder resumes from the
newest commit record that reads whole (``resume``): what a micro-batch after it
left behind (state folders of micro-batch N+1 and later, a ``*.tmp`` commit, a
torn or unreadable commit file) was never committed and is removed first, so
the replayed micro-batch writes where its dead attempt did. A pipeline whose
stages differ is an update: it resumes if it keeps every transform holding
state with its label and coders (``update.check``), else it is refused with
every problem named. Refusals (that one, another pipeline's folder, a drained
stream) are read from the folder alone (``admit``), before anything in it is
touched; the runner asks ``admit`` before Spark starts, so a refused run starts
no JVM.

**Garbage.** After commit N, commit records older than the newest ``RETAIN``
are deleted, and state folders none of the retained records refers to (the
newest record carries the metrics so far), and in the folders they refer to
the files they do not name (a failed or speculative task attempt's): the
folder's size follows the live state, not the stream's age. A restart does
the same at once for every folder up to the commit it resumes from.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import tempfile
import uuid
from typing import Any

from beam_spark_inproc.execution.streaming import drain
from beam_spark_inproc.execution.streaming import file_sinks
from beam_spark_inproc.planning import plan as p

_LOGGER = logging.getLogger(__name__)


class CheckpointOwnedError(ValueError):
    """The checkpoint location holds another pipeline's state."""


def stage_key(name: str) -> str:
    """A stage's identity across processes: the parts its name fuses, sorted.

    Beam's fusion may order the same pipeline's stages, and the parts within a
    fused stage's name (``((A)+(B))+(C)``), differently in another process
    (set iteration under hash randomization)."""
    return '+'.join(sorted(set(re.findall(r'[^()+]+', name))))


def fingerprint(plan: p.SparkPlan) -> list:
    """The stages (key, sorted transform labels), in key order."""
    return sorted([stage_key(stage.name), sorted(stage.labels)] for stage in plan.stages)


def describe_changes(theirs: list, mine: list) -> str:
    """What differs between two fingerprints, in transform labels."""
    old = {label for _, labels in theirs for label in labels}
    new = {label for _, labels in mine for label in labels}
    lines = []
    if new - old:
        lines.append('transforms added: ' + ', '.join(sorted(new - old)))
    if old - new:
        lines.append('transforms removed: ' + ', '.join(sorted(old - new)))
    if not lines:  # the same transforms, fused into other stages
        gone = [st for st in theirs if st not in mine]
        came = [st for st in mine if st not in theirs]
        lines = [f'stage {_stage(st)} is gone' for st in gone[:3]] + [
            f'stage {_stage(st)} is new' for st in came[:3]
        ]
        lines = lines or ['the stages differ']
    return '; '.join(lines)


def _stage(entry) -> str:
    if entry is None:
        return 'absent'
    name, labels = entry
    return f'{name!r} ({", ".join(labels)})'


_MB = re.compile(r'mb-(\d+)$')


@dataclasses.dataclass
class Admission:
    """What a checkpoint location says of a pipeline about to run on it,
    read without writing (``admit``)."""

    root: str
    theirs: dict | None  # its pipeline.json (None: a new location)
    mine: dict  # what this pipeline's pipeline.json says
    update: Any  # how this pipeline takes the state over (``update.Update``)
    stream_id: str  # the stream's id: the same on every run of the location


def admit(plan: p.SparkPlan, location: str, owner: Any = None) -> Admission:
    """Reads the checkpoint location a stream is about to run on and raises
    its refusals, writing nothing (the runner calls it before Spark starts,
    ``CheckpointStore`` again before it touches anything): another
    pipeline's state that this one cannot take over
    (``CheckpointOwnedError``, ``update.IncompatibleUpdateError``), a drained
    stream (``drain.StreamDrainedError``)."""
    root = os.path.abspath(location)
    path = os.path.join(root, 'pipeline.json')
    mine = dict(owner.description if owner is not None else {'stages': fingerprint(plan)})
    theirs, update = None, None
    if os.path.exists(path):
        with open(path) as f:
            theirs = json.load(f)
        if owner is not None and 'holders' in theirs:
            update = owner.take_over(theirs, root)
        elif sorted(theirs.get('stages', [])) != mine['stages']:
            raise CheckpointOwnedError(
                f'--checkpoint_location {root!r} holds the state of '
                'another pipeline (or of an earlier version of this one): '
                f'{describe_changes(theirs.get("stages", []), mine["stages"])}'
                '. Its state cannot be restored into this pipeline and '
                'nothing was overwritten. Run the pipeline as it was to '
                'resume, or give this one its own checkpoint location.'
            )
    record = drain.newest_record(root)
    drain.refuse_drained(record, root)
    stream_id = (theirs or {}).get('stream') or (
        ((record or {}).get('progress') or {}).get('latest') or {}
    ).get('stream')
    mine['stream'] = stream_id or uuid.uuid4().hex[:8]
    return Admission(root, theirs, mine, update, mine['stream'])


class CheckpointStore:
    RETAIN = 2  # commit records kept (Spark's minBatchesToRetain is 100)

    def __init__(self, plan: p.SparkPlan, location: str | None, owner: Any = None):
        """``owner``: what ``pipeline.json`` says of ``plan`` and how it takes
        another pipeline's state over (``update.Owner``); None: the stages
        only, and another pipeline's state is refused. Refusals come before
        anything in the folder is touched (``admit``)."""
        self.temporary = not location
        self.root = os.path.abspath(location or tempfile.mkdtemp(prefix='beam-spark-stream-'))
        path = os.path.join(self.root, 'pipeline.json')
        admitted = admit(plan, self.root, owner)
        theirs, mine = admitted.theirs, admitted.mine
        self.stream_id = admitted.stream_id
        self.resume: dict | None = None
        # How this pipeline takes over the state of another (``update``).
        self.update = admitted.update
        self._owner: dict | None = None  # pipeline.json at the first commit
        self._driver_written: tuple[bytes, str] | None = None  # data, path
        if theirs is not None:
            if theirs != mine:  # an update, or written before it named
                self._owner = mine  # state's holders or the stream's id
            os.makedirs(os.path.join(self.root, 'commits'), exist_ok=True)
            self.resume = self._recover()
        else:
            if owner is not None and owner.mapping:
                _LOGGER.warning(
                    "--transform_name_mapping is ignored: %s holds no earlier run's state",
                    self.root,
                )
            os.makedirs(self.root, exist_ok=True)
            self._write_json(path, mine)
        os.makedirs(os.path.join(self.root, 'commits'), exist_ok=True)
        self.side_input_folder = os.path.join(self.root, 'side-inputs')
        shutil.rmtree(self.side_input_folder, ignore_errors=True)  # a dead run's
        os.makedirs(self.side_input_folder)
        # File sinks' temporary files of uncommitted micro-batches (file_sinks).
        earlier = file_sinks.remember(
            self.root,
            file_sinks.temp_directories(getattr(plan, 'components', b'')),
            self._write_json,
        )
        if earlier:
            committed_at = (
                float('-inf')
                if self.resume is None
                else os.path.getmtime(
                    os.path.join(self.root, 'commits', f'{self.resume["micro_batch"]}.json')
                )
            )
            file_sinks.remove_uncommitted(earlier, committed_at)

    # -- restart ------------------------------------------------------------
    def _recover(self) -> dict | None:
        """The newest whole commit record; leftovers after it are removed."""
        folder = os.path.join(self.root, 'commits')
        last, record = -1, None
        for n in sorted(self.commits(), reverse=True):
            try:
                candidate = self.read_commit(n)
            except (OSError, ValueError):
                continue  # torn: never committed
            if candidate.get('micro_batch') == n:
                last, record = n, candidate
                break
        for name in os.listdir(folder):
            match = re.fullmatch(r'(\d+)\.json', name)
            if match is None or int(match.group(1)) > last:
                os.remove(os.path.join(folder, name))
        for path, micro_batch in self._state_folders():
            if micro_batch > last:
                shutil.rmtree(path, ignore_errors=True)
        for n, path in self._driver_files():
            if n > last:
                _remove(path)
        if record is not None:  # attempts' files no record names, all of
            self._collect_garbage(last, record, settled=True)  # them dead
        return record

    def _state_folders(self) -> list[tuple[str, int]]:
        found = []
        state = os.path.join(self.root, 'state')
        for stage in os.listdir(state) if os.path.isdir(state) else ():
            for name in os.listdir(os.path.join(state, stage)):
                match = _MB.fullmatch(name)
                if match:
                    found.append((os.path.join(state, stage, name), int(match.group(1))))
        return found

    # -- micro-batches ------------------------------------------------------
    def state_path(self, stage: int, micro_batch: int) -> str:
        return os.path.join(self.root, 'state', f'stage-{stage}', f'mb-{micro_batch}')

    def _driver_files(self) -> list[tuple[int, str]]:
        folder = os.path.join(self.root, 'driver')
        return [
            (int(m.group(1)), os.path.join(folder, name))
            for name in (os.listdir(folder) if os.path.isdir(folder) else ())
            for m in [re.fullmatch(r'(\d+)\.pickle(\.tmp)?', name)]
            if m
        ]

    def relative(self, path: str) -> str:
        """``path`` as a commit record names it: relative to the checkpoint
        location when it is inside (a moved folder still resumes)."""
        path = os.path.abspath(path)
        if path.startswith(self.root + os.sep):
            return os.path.relpath(path, self.root)
        return path

    def absolute(self, path: str) -> str:
        """A path a commit record names, in this location (an absolute path,
        from a record written before paths were relative, as it is)."""
        return os.path.join(self.root, path)

    def write_driver_state(self, micro_batch: int, data: bytes) -> str:
        """Writes what the driver holds after ``micro_batch`` (before its
        commit record, which names the returned path). Unchanged since the
        last write: nothing is written and the file written then is named
        again (kept while a retained record names it)."""
        last = self._driver_written
        if last is not None and last[0] == data and os.path.exists(last[1]):
            return last[1]
        folder = os.path.join(self.root, 'driver')
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f'{micro_batch}.pickle')
        _write_atomically(path, data)
        self._driver_written = (data, path)
        return path

    def commit(self, micro_batch: int, record: dict) -> None:
        self._write_json(os.path.join(self.root, 'commits', f'{micro_batch}.json'), record)
        if self._owner is not None:  # an updated pipeline's first commit
            self._write_json(os.path.join(self.root, 'pipeline.json'), self._owner)
            self._owner = None
        self._collect_garbage(micro_batch, record)

    def _collect_garbage(self, micro_batch: int, record: dict, settled: bool = False) -> None:
        """Drops the commit records before the newest ``RETAIN``, the state
        folders none of the kept records refers to, and in the others the
        files none of them names (a failed or speculative task attempt's: a
        file per attempt, only the committed attempt's is named). Folders of
        ``micro_batch`` itself are left alone (unless ``settled``: on restart)
        an attempt of its jobs that Spark abandoned may still be writing
        there; the next commit collects them."""
        oldest = micro_batch - self.RETAIN + 1
        live = self._paths(record)
        driver = {self._driver_path(record)}
        for n in self.commits():
            if n < oldest:
                try:
                    os.remove(os.path.join(self.root, 'commits', f'{n}.json'))
                except FileNotFoundError:
                    pass
            elif n < micro_batch:
                try:
                    kept = self.read_commit(n)
                except (OSError, ValueError):
                    continue
                live |= self._paths(kept)
                driver.add(self._driver_path(kept))
        folders: dict[str, set[str]] = {}
        for path in live:
            folders.setdefault(_folder(path), set()).add(path)
        for n, path in self._driver_files():
            if n < oldest and os.path.abspath(path) not in driver:
                _remove(path)
        for path, n in self._state_folders():
            if n > micro_batch or (n == micro_batch and not settled):
                continue
            named = folders.get(os.path.abspath(path))
            if named is None:
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.abspath(path) not in named:  # files, not the folder
                for name in os.listdir(path):
                    if os.path.join(os.path.abspath(path), name) not in named:
                        _remove(os.path.join(path, name))

    def remove_side_inputs(self, keep: set[str]) -> None:
        """Removes the side-input files not in ``keep`` (absolute paths)."""
        for name in os.listdir(self.side_input_folder):
            path = os.path.join(self.side_input_folder, name)
            if path not in keep:
                _remove(path)

    def commits(self) -> list[int]:
        return sorted(
            int(name[:-5])
            for name in os.listdir(os.path.join(self.root, 'commits'))
            if re.fullmatch(r'\d+\.json', name)
        )

    def committed_at(self, micro_batch: int) -> float | None:
        """When commit ``micro_batch`` was written (its file's time), or None."""
        try:
            return os.path.getmtime(os.path.join(self.root, 'commits', f'{micro_batch}.json'))
        except OSError:
            return None

    def read_commit(self, micro_batch: int) -> dict:
        with open(os.path.join(self.root, 'commits', f'{micro_batch}.json')) as f:
            return json.load(f)

    def size(self) -> int:
        """Bytes under the checkpoint location (for benchmarks)."""
        return sum(
            os.path.getsize(os.path.join(d, name))
            for d, _, names in os.walk(self.root)
            for name in names
        )

    def close(self) -> None:
        if self.temporary:
            shutil.rmtree(self.root, ignore_errors=True)

    def _driver_path(self, record: dict) -> str | None:
        named = record.get('driver_state')
        return os.path.abspath(self.absolute(named)) if named else None

    def _paths(self, record: dict) -> set[str]:
        """The state files a commit record names (absolute): a bucket's path
        is its Parquet file in a state folder ``mb-N`` (written by the
        stage's task), or the folder itself."""
        return {
            os.path.abspath(self.absolute(b['path']))
            for stage in record.get('stages', ())
            for b in stage.get('buckets', {}).values()
        }

    @staticmethod
    def _write_json(path: str, record) -> None:
        _write_atomically(path, json.dumps(record, sort_keys=True).encode())


def _write_atomically(path: str, data: bytes) -> None:
    """``data`` at ``path`` whole or not at all (``path.tmp``, synced, renamed)."""
    tmp = path + '.tmp'
    with open(tmp, 'wb') as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass


def _folder(path: str) -> str:
    path = os.path.abspath(path)
    return path if _MB.search(path) else os.path.dirname(path)
