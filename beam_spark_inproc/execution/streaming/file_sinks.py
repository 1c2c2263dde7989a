"""Beam's file sinks in a stream: temporary files of uncommitted micro-batches.

``fileio.WriteToFiles`` writes each bundle to a uniquely named file in a hidden
folder (``.temp<uuid>`` under the output path, named when the pipeline is
built, so a new one per run) and moves a window's files to their final names in
the micro-batch that fires its pane; until then the file names wait in the
GroupByKey's state. A micro-batch that never committed (the driver died) may
have written temporary files nothing will ever move: its replay writes new ones.

The checkpoint remembers the temporary folders of every run (``sinks.json``).
On restart, in the folders of earlier runs, files written after the commit
record the stream resumes from are removed (every micro-batch up to it had
finished its jobs when its record was written, so a later file is an
uncommitted micro-batch's), and folders left empty go too; older files may
still be waiting for their pane and stay. The rule compares modification
times with the commit record's: on a shared file system whose clock differs
from the writers' it is only as good as their agreement.
"""

from __future__ import annotations

import base64
import bz2
import json
import logging
import os
import shutil
import zlib
from typing import Any
from typing import Callable

from apache_beam.internal import pickler
from apache_beam.io import fileio
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2

_LOGGER = logging.getLogger(__name__)
SINKS = 'sinks.json'


def temp_directories(components_bytes: bytes) -> list[str]:
    """The temporary folders of the pipeline's ``WriteToFiles`` transforms."""
    components = beam_runner_api_pb2.Components.FromString(components_bytes)
    found = set()
    for transform in components.transforms.values():
        if transform.spec.urn != common_urns.primitives.PAR_DO.urn:
            continue
        payload = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload)
        if not _names_the_move(payload.do_fn.payload):
            continue  # unpickle no user DoFn in the driver
        try:
            fn = pickler.loads(payload.do_fn.payload)[0]
        except Exception:  # pylint: disable=broad-except
            continue
        if isinstance(fn, fileio._MoveTempFilesIntoFinalDestinationFn):
            found.add(fn.temporary_directory.get())
    return sorted(found)


def _names_the_move(data: bytes) -> bool:
    """Whether a pickled DoFn (Beam's pickler: base64 of a pickle, maybe
    compressed) names ``_MoveTempFilesIntoFinalDestinationFn``."""
    name = b'_MoveTempFilesIntoFinalDestinationFn'
    try:
        raw = base64.b64decode(data)
    except ValueError:
        return False
    for decompress in (lambda d: d, zlib.decompress, bz2.decompress):
        try:
            if name in decompress(raw):
                return True
        except (OSError, ValueError, zlib.error):
            continue
    return False


def remember(root: str, mine: list[str], write_json: Callable[[str, Any], None]) -> list[str]:
    """Adds this run's folders to the checkpoint's list (written with the
    store's ``write_json``); returns the earlier runs' folders."""
    path = os.path.join(root, SINKS)
    earlier: list[str] = []
    if os.path.exists(path):
        with open(path) as f:
            earlier = json.load(f)
    if set(mine) - set(earlier):
        write_json(path, sorted(set(earlier) | set(mine)))
    return sorted(set(earlier) - set(mine))


def remove_uncommitted(folders: list[str], committed_at: float) -> int:
    """Removes files written after ``committed_at`` (a commit record's
    modification time) from ``folders``, and the folders left empty;
    returns how many files went."""
    removed = 0
    for folder in folders:
        if not os.path.isdir(folder):
            continue
        for dirpath, _, names in os.walk(folder):
            for name in names:
                path = os.path.join(dirpath, name)
                try:
                    if os.path.getmtime(path) > committed_at:
                        os.remove(path)
                        removed += 1
                except FileNotFoundError:
                    pass
        if not any(names for _, _, names in os.walk(folder)):
            shutil.rmtree(folder, ignore_errors=True)
    if removed:
        _LOGGER.info(
            'Removed %d temporary files of uncommitted micro-batches from %s', removed, folders
        )
    return removed
