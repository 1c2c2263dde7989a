"""A ``fileio.WriteToFiles`` file naming that keeps every pane of a window.

Beam's ``WriteToFiles`` calls its naming function with ``(window, pane,
shard_index, total_shards, compression, destination)`` when it moves a
pane's temporary files to their final names. Its writer for the first
``max_writers_per_bundle`` windows of a bundle (20 by default: nearly always
all of them) passes ``pane=None``, and its default naming
(``fileio.default_file_naming``) leaves the pane out even when it has one: a
window's files are named by window and shard only, so a later pane of the
same window (a late firing, a repeated trigger) is moved onto the earlier
pane's name and replaces its file. That is Beam's behaviour on every runner.

``pane_file_naming`` names each file after its pane's index too::

    fileio.WriteToFiles(
        path, shards=1, max_writers_per_bundle=0,
        file_naming=pane_file_naming('counts', '.csv'))
    # counts-2026-12-02T14:00:00-2026-12-02T14:00:05-pane-0-00000-of-00001.csv
    # counts-2026-12-02T14:00:00-2026-12-02T14:00:05-pane-1-00000-of-00001.csv

It needs ``max_writers_per_bundle=0`` and ``shards=N``: every record then goes
to Beam's sharded writer, which groups the records per window and shard
(each group a pane of the window's trigger) and hands the pane on to the
naming. The names are
deterministic (window, pane index, shard), so a micro-batch replayed after a
restart fires the same panes and moves them to the same names: exactly once,
as with Beam's own naming. Runs in the workers (imports Beam only).
"""

from __future__ import annotations

from typing import Callable
from typing import Optional

from apache_beam.transforms.window import GlobalWindow


def pane_file_naming(prefix: Optional[str] = None, suffix: str = '') -> Callable[..., str]:
    """A ``WriteToFiles(file_naming=...)``: ``PREFIX-START-END-pane-I-SHARD-of-N
    SUFFIX`` (window bounds left out in the global window; ``prefix`` None: the
    destination, as ``fileio.destination_prefix_naming``)."""

    def name(window, pane, shard_index, total_shards, compression, destination) -> str:
        if pane is None:
            raise ValueError(
                'pane_file_naming: WriteToFiles gave no pane to name this file by; give '
                'WriteToFiles max_writers_per_bundle=0 and shards=N (its unsharded writer, '
                'used for the first max_writers_per_bundle windows of a bundle, passes none)'
            )
        parts = [str(destination if prefix is None else prefix)]
        if not isinstance(window, GlobalWindow):
            parts += [
                window.start.to_utc_datetime().isoformat(),
                window.end.to_utc_datetime().isoformat(),
            ]
        parts.append(f'pane-{pane.index}')
        if shard_index is not None and total_shards:
            parts.append(f'{int(shard_index):05d}-of-{int(total_shards):05d}')
        return '-'.join(parts) + (suffix or '') + (f'.{compression}' if compression else '')

    return name
