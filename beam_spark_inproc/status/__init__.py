"""``python -m beam_spark_inproc status CHECKPOINT_LOCATION``: a stream's progress
read from its checkpoint, running or stopped.

Every commit record (``execution.streaming.restart``) carries the progress of
its micro-batch and a short history of the recent ones
(``execution.streaming.progress``). This command reads the newest commit
record that reads whole, and nothing else: it never writes to the folder,
never takes a lock, and works while the stream runs (commit records are
written to a temporary name and renamed; an older one may be collected while
it is being read, then the next older is read). It shows:

* a **table** (``render``): the micro-batch, its duration split into Spark
  jobs and driver work, its input, state and backlog; whether the stream has
  **caught up** and, per read (a source, a splittable DoFn, by its label), the
  elements it emitted, its position and what it has left
  (``execution.streaming.backlog``); and per stage its
  input and output watermarks, their lag behind the wall clock, elements in
  and out, state keys and bytes; then a sparkline of the recent
  micro-batches' durations; a stream draining or drained says so (the
  record's ``drain``, ``execution.streaming.drain``);
* with ``--watch [SECONDS]``, the same redrawn every SECONDS (2) until
  Ctrl-C;
* with ``--html FILE``, a self-contained HTML page (``page``): the stages as
  boxes coloured by their lag, arrows from what each reads, and the recent
  micro-batches as bars split into job and driver time (rewritten every
  refresh with ``--watch``; the page reloads itself then);
* with ``--json``, the latest progress as JSON (what ``result.progress()``
  returned for that micro-batch).

A folder that is not a stream's checkpoint location (no ``pipeline.json``
and ``commits/``), or no folder at all, is an error: a message on stderr and
exit code 2. A checkpoint whose first micro-batch is not committed yet says
so (exit code 0). A commit record without progress (written by an older
version of the runner) still gives its watermarks and state keys.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
import time

_BARS = '▁▂▃▄▅▆▇█'


class NotACheckpoint(ValueError):
    """The folder given is not a stream's checkpoint location."""


def read(location: str) -> tuple[dict | None, float | None]:
    """The newest whole commit record under ``location`` and its file's
    modification time, or (None, None) when none is committed yet."""
    if not os.path.isdir(location):
        raise NotACheckpoint(f'{location}: no such folder')
    commits = os.path.join(location, 'commits')
    if not (os.path.isfile(os.path.join(location, 'pipeline.json')) and os.path.isdir(commits)):
        raise NotACheckpoint(
            f"{location} is not a stream's checkpoint location: it has no "
            'pipeline.json and commits/ folder (a streaming pipeline run with '
            '--checkpoint_location=FOLDER writes both there)'
        )
    numbers = sorted(
        (
            int(m.group(1))
            for name in os.listdir(commits)
            for m in [re.fullmatch(r'(\d+)\.json', name)]
            if m
        ),
        reverse=True,
    )
    for n in numbers:
        path = os.path.join(commits, f'{n}.json')
        try:
            with open(path) as f:
                record = json.load(f)
            when = os.path.getmtime(path)
        except (OSError, ValueError):
            continue  # collected while listed, or torn: an older one
        if record.get('micro_batch') == n:
            return record, when
    return None, None


def progress_of(record: dict) -> tuple[dict, list[dict]]:
    """(latest progress, recent history) of a commit record; for a record
    without progress, what its stages say (watermarks, state keys)."""
    saved = record.get('progress')
    if saved and saved.get('latest'):
        return saved['latest'], list(saved.get('recent', ()))
    stages = []
    for i, stage in enumerate(record.get('stages', ())):
        entry = {
            'stage': i + 1,
            'name': stage['name'],
            'reads': [],
            'input_watermark': _instant(stage['input_watermark']),
            'output_watermark': _instant(stage['output_watermark']),
        }
        if stage.get('buckets'):
            entry['state_keys'] = sum(b.get('keys', 0) for b in stage['buckets'].values())
        stages.append(entry)
    return {'micro_batch': record.get('micro_batch'), 'stages': stages}, []


# Beam's MIN_TIMESTAMP and MAX_TIMESTAMP in micros (this module imports no
# Beam: the command starts at once and stays quiet).
_MIN_MICROS, _MAX_MICROS = -9223372036854775000, 9223372036854775000
_EPOCH = datetime.datetime(1970, 1, 1)


def _instant(micros: int) -> str:
    """A watermark in micros as the progress writes it (``progress.instant``)."""
    if micros >= _MAX_MICROS:
        return '+inf'
    if micros <= _MIN_MICROS:
        return '-inf'
    return (_EPOCH + datetime.timedelta(microseconds=micros)).isoformat() + 'Z'


def seconds(instant: str) -> float | None:
    """An RFC 3339 instant (``...Z``) in seconds since the epoch; None for
    ``±inf``."""
    if instant in ('-inf', '+inf'):
        return None
    moment = datetime.datetime.fromisoformat(instant.replace('Z', '+00:00'))
    return (moment - _EPOCH.replace(tzinfo=datetime.timezone.utc)) / datetime.timedelta(seconds=1)


def lag(watermark: str, now: float) -> float | None:
    """Seconds a watermark (RFC 3339, or ``±inf``) is behind ``now``."""
    at = seconds(watermark)
    return None if at is None else now - at


def human_bytes(n: float | None) -> str:
    if n is None:
        return '?'
    for unit in ('B', 'KB', 'MB', 'GB'):
        if n < 1024 or unit == 'GB':
            return f'{n:.0f} {unit}' if unit == 'B' else f'{n:.1f} {unit}'
        n /= 1024
    return f'{n} B'


def human_seconds(s: float | None) -> str:
    if s is None:
        return '-'
    if abs(s) < 120:
        return f'{s:.1f} s'
    if abs(s) < 7200:
        return f'{s / 60:.1f} min'
    if abs(s) < 172800:
        return f'{s / 3600:.1f} h'
    return f'{s / 86400:.0f} d'


def stage_lag(stage: dict, written: float) -> float | None:
    """A stage's output watermark lag as its progress recorded it (at the
    commit), else behind the commit record's time."""
    if 'output_watermark_lag_seconds' in stage:
        return stage['output_watermark_lag_seconds']
    return lag(stage['output_watermark'], written)


def drain_state(record: dict) -> str:
    """What a commit record says of a drain (``execution.streaming.drain``),
    or '' when the stream was not draining."""
    drain = record.get('drain')
    if not drain:
        return ''
    if drain.get('drained'):
        return 'drained: every window and timer fired, the stream ended'
    return (
        f'draining since micro-batch {drain.get("after_micro_batch")} '
        f'(requested by {drain.get("requested_by")})'
    )


def describe_read(read: dict) -> str:
    """A read's backlog (``execution.streaming.backlog``) in a few words."""
    b = read.get('backlog') or {}
    if read['kind'] == 'splittable DoFn':
        due, waiting = b.get('due_restrictions', 0), b.get('waiting_restrictions', 0)
        if due:
            return f'{due} restriction{"s" if due != 1 else ""} due now'
        if waiting and b.get('next_due_in_seconds') is not None:
            return f'next read {b["next_due_in_seconds"]:.1f} s after that commit'
        return 'nothing left to read' if not waiting else f'{waiting} waiting'
    if 'events' in b:
        return f'{b["events"]} events left' if b['events'] else 'every event read'
    if 'staged_batches' in b:
        staged = (
            f'{b["staged_batches"]} Spark batches ({b.get("staged_rows", "?")} rows) '
            'staged, not read'
            if b['staged_batches']
            else 'every staged batch read'
        )
        return f'{staged}; Spark query: {b.get("spark_query", "?")}'
    if 'unknown' in b:
        return f'backlog unknown ({b["unknown"]})'
    return ''


def reads_lines(latest: dict) -> list[str]:
    """The progress's reads: whether the stream caught up, then each read."""
    reads = latest.get('sources')
    if not reads:
        return []
    caught = latest.get('caught_up')
    lines = [
        '  caught up: every read has read what there was when it last looked'
        if caught
        else '  catching up: '
        + ', '.join(repr(r['source']) for r in reads if not r['caught_up'])
        + ' still behind'
    ]
    for r in reads:
        lines.append(
            f'    {r["source"]!r} ({r["kind"]}, stage {r["stage"]}): '
            f'{"caught up" if r["caught_up"] else "behind"}; {r["elements"]} elements read'
            + (f', at {r["position"]}' if r.get('position') else '')
            + (f'; {describe_read(r)}' if describe_read(r) else '')
        )
    return lines


def scale(values: list[float]) -> float:
    """The top of a chart of ``values``: their largest, but at most four
    times their median, so that one slow micro-batch (the first one, which
    starts Spark's workers) does not flatten the rest (those above it show
    at the top)."""
    ordered = sorted(values)
    median = ordered[len(ordered) // 2] if ordered else 0.0
    top = ordered[-1] if ordered else 0.0
    return (min(top, 4 * median) if median > 0 else top) or 1.0


def sparkline(values: list[float]) -> str:
    if not values:
        return ''
    top = scale(values)
    return ''.join(
        _BARS[min(len(_BARS) - 1, int(v / top * (len(_BARS) - 1) + 0.5))] for v in values
    )


def _cell(value, width: int) -> str:
    text = '-' if value is None else str(value)
    return (text if len(text) <= width else text[: width - 1] + '…').ljust(width)


def render(
    location: str, record: dict | None, written: float | None, now: float | None = None
) -> str:
    """The terminal view of a checkpoint's newest commit record."""
    now = time.time() if now is None else now
    if record is None:
        return f'{location}: a stream checkpoint with no committed micro-batch yet\n'
    written = now if written is None else written  # ``read`` gives both or neither
    latest, recent = progress_of(record)
    head = (
        f'Stream {latest.get("stream", "?")} at {location}: micro-batch '
        f'{latest["micro_batch"]} committed '
        f'{latest.get("timestamp", "?")} '
        f'({human_seconds(now - written)} ago)'
    )
    lines = [head]
    if drain_state(record):
        lines.append(f'  {drain_state(record)}')
    if 'duration_seconds' in latest:
        rate = latest.get('elements_per_second')
        lines.append(
            f'  took {latest["duration_seconds"]:.2f} s: Spark jobs '
            f'{latest["job_seconds"]:.2f} s, driver '
            f'{latest["driver_seconds"]:.2f} s; {latest["elements_in"]} '
            f'elements in ({"-" if rate is None else rate}/s)'
        )
        b = latest['backlog']
        lines.append(
            f'  state {latest["state_keys"]} keys, '
            f'{human_bytes(latest["state_bytes"])}; backlog: '
            f'{b["timer_buckets"]} state buckets with timers, '
            f'{b["due_residuals"]} of {b["pending_residuals"]} residuals due, '
            f'{b["held_side_input_elements"]} elements held behind side inputs'
        )
    lines += reads_lines(latest)
    lines.append('')
    columns = [
        ('#', 3),
        ('stage', 34),
        ('reads', 6),
        ('input watermark', 28),
        ('output watermark', 28),
        ('lag', 9),
        ('in', 9),
        ('out', 9),
        ('total in', 10),
        ('total out', 10),
        ('keys', 8),
        ('bytes', 9),
    ]
    lines.append(' '.join(_cell(name, width) for name, width in columns).rstrip())
    for s in latest['stages']:
        values = [
            s['stage'],
            s['name'],
            ','.join(map(str, s['reads'])) or '-',
            s['input_watermark'],
            s['output_watermark'],
            human_seconds(stage_lag(s, written or now)),
            s.get('elements_in'),
            s.get('elements_out'),
            s.get('total_elements_in'),
            s.get('total_elements_out'),
            s.get('state_keys'),
            human_bytes(s['state_bytes']) if 'state_bytes' in s else None,
        ]
        lines.append(' '.join(_cell(v, w) for v, (_, w) in zip(values, columns)).rstrip())
    if recent:
        durations = [r['duration_seconds'] for r in recent]
        jobs = sum(r['job_seconds'] for r in recent)
        lines += [
            '',
            f'micro-batches {recent[0]["micro_batch"]}-'
            f'{recent[-1]["micro_batch"]}: {sparkline(durations)}  '
            f'(max {max(durations):.2f} s, mean '
            f'{sum(durations) / len(durations):.2f} s, Spark jobs '
            f'{100 * jobs / (sum(durations) or 1):.0f}%)',
        ]
    return '\n'.join(lines) + '\n'


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog='python -m beam_spark_inproc status',
        description="A stream's progress from its checkpoint location's "
        'commit records (running or stopped).',
    )
    parser.add_argument('checkpoint', help='the --checkpoint_location folder')
    parser.add_argument(
        '--watch',
        nargs='?',
        type=float,
        const=2.0,
        metavar='SECONDS',
        help='redraw every SECONDS (2) until Ctrl-C',
    )
    parser.add_argument(
        '--html', metavar='FILE', help='also write a self-contained HTML page there'
    )
    parser.add_argument('--json', action='store_true', help='print the latest progress as JSON')
    args = parser.parse_args(argv)
    if args.watch is not None and args.watch <= 0:
        parser.error('--watch SECONDS must be > 0')
    try:
        while True:
            try:
                record, written = read(args.checkpoint)
            except NotACheckpoint as e:
                print(f'status: {e}', file=sys.stderr)
                return 2
            if args.html:
                from beam_spark_inproc.status.page import page

                _write(args.html, page(args.checkpoint, record, written, refresh=args.watch))
            if args.json:
                text = (
                    json.dumps(None if record is None else progress_of(record)[0], indent=1) + '\n'
                )
            else:
                text = render(args.checkpoint, record, written)
            if args.watch is None:
                sys.stdout.write(text)
                return 0
            sys.stdout.write('\x1b[H\x1b[2J' + text)  # home, clear
            sys.stdout.flush()
            time.sleep(args.watch)
    except KeyboardInterrupt:
        return 0


def _write(path: str, text: str) -> None:
    tmp = path + '.tmp'
    with open(tmp, 'w', encoding='utf-8') as f:
        f.write(text)
    os.replace(tmp, path)  # a browser reloading it sees a whole page
