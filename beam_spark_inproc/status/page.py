"""The status page: a stream's progress as one self-contained HTML file.

No script, no external file: inline CSS and SVG, so the page opens from disk,
mails as an attachment and renders in any browser. Drawn from a commit
record's progress (``status.progress_of``):

* **stages** as boxes, in columns by depth (a stage one column right of the
  deepest stage it reads), arrows from each stage to its readers; each box
  shows the stage's number and transforms, its input and output watermarks,
  the output watermark's lag behind the wall clock, elements in and out
  (this micro-batch, and in total), and for a keyed stage its state keys and
  bytes. The fill says how far behind it is: grey at +inf (done), white with
  no watermark yet (-inf), then green under a minute of lag, amber under ten
  minutes, red beyond (a TestStream's watermarks near the epoch are red);
* the **recent micro-batches** as bars, their height the duration (up to
  four times the median: a longer one reaches the top), the dark part the
  Spark jobs, the light part the driver; hovering a bar names it.

With ``refresh`` (``--watch``) the page reloads itself every that many
seconds (``<meta http-equiv="refresh">``).
"""

from __future__ import annotations

import html
import time

from beam_spark_inproc.status import drain_state
from beam_spark_inproc.status import human_bytes
from beam_spark_inproc.status import human_seconds
from beam_spark_inproc.status import progress_of
from beam_spark_inproc.status import scale
from beam_spark_inproc.status import stage_lag

_W, _H, _GAP_X, _GAP_Y = 300, 132, 50, 24


def _fill(stage: dict, written: float) -> str:
    if stage['output_watermark'] == '+inf':
        return '#e4e7eb'
    if stage['output_watermark'] == '-inf':
        return '#ffffff'
    lag = stage_lag(stage, written) or 0.0
    return '#c9ecc6' if lag < 60 else '#fbe3a6' if lag < 600 else '#f6b8b0'


def _layout(stages: list[dict]) -> dict[int, tuple[int, int]]:
    """Stage number -> (column, row)."""
    depth: dict[int, int] = {}
    for s in stages:  # producers first (the plan's order)
        depth[s['stage']] = 1 + max((depth.get(r, 0) for r in s['reads']), default=-1)
    rows: dict[int, int] = {}
    where = {}
    for s in stages:
        column = depth[s['stage']]
        where[s['stage']] = (column, rows.get(column, 0))
        rows[column] = rows.get(column, 0) + 1
    return where


def _text(x: float, y: float, text: str, cls: str = '') -> str:
    return (
        f'<text x="{x:.0f}" y="{y:.0f}"{f" class={cls!r}" if cls else ""}>'
        f'{html.escape(text)}</text>'
    )


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + '…'


def _count(this, total) -> str:
    if this is None and total is None:
        return '-'
    return f'{this} ({total})'


def stages_svg(stages: list[dict], written: float) -> str:
    where = _layout(stages)
    columns = 1 + max((c for c, _ in where.values()), default=0)
    rows = 1 + max((r for _, r in where.values()), default=0)
    width = columns * (_W + _GAP_X)
    height = rows * (_H + _GAP_Y) + _GAP_Y
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" '
        'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>',
    ]

    def box(number: int) -> tuple[float, float]:
        column, row = where[number]
        return column * (_W + _GAP_X) + 10, row * (_H + _GAP_Y) + _GAP_Y

    for s in stages:
        x, y = box(s['stage'])
        for r in s['reads']:
            if r in where:
                rx, ry = box(r)
                out.append(
                    f'<line x1="{rx + _W:.0f}" y1="{ry + _H / 2:.0f}" '
                    f'x2="{x:.0f}" y2="{y + _H / 2:.0f}" stroke="#555" '
                    'marker-end="url(#arrow)"/>'
                )
    for s in stages:
        x, y = box(s['stage'])
        out.append(
            f'<g><title>{html.escape(s["name"])}</title>'
            f'<rect x="{x:.0f}" y="{y:.0f}" width="{_W}" height="{_H}" '
            f'rx="6" fill="{_fill(s, written)}" stroke="#333"/>'
        )
        lines = [
            (f'{s["stage"]}  {_short(s["name"], 32)}', 'name'),
            (f'in wm  {s["input_watermark"]}', ''),
            (f'out wm {s["output_watermark"]}', ''),
            (f'lag {human_seconds(stage_lag(s, written))}', 'lag'),
            (f'elements in {_count(s.get("elements_in"), s.get("total_elements_in"))}', ''),
            (f'elements out {_count(s.get("elements_out"), s.get("total_elements_out"))}', ''),
        ]
        if 'state_keys' in s:
            lines.append((f'state {s["state_keys"]} keys, {human_bytes(s.get("state_bytes"))}', ''))
        out += [_text(x + 8, y + 18 + 16 * k, t, c) for k, (t, c) in enumerate(lines)]
        out.append('</g>')
    out.append('</svg>')
    return '\n'.join(out)


def durations_svg(recent: list[dict]) -> str:
    if not recent:
        return '<p>No micro-batch history in this commit record.</p>'
    bar, height = 8, 120
    top = scale([r['duration_seconds'] for r in recent])
    width = len(recent) * (bar + 2) + 60
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height + 30}" viewBox="0 0 {width} {height + 30}">',
        _text(0, 12, f'{top:.2f} s', 'axis'),
        _text(0, height + 4, '0', 'axis'),
    ]
    for k, r in enumerate(recent):
        x = 50 + k * (bar + 2)
        shown = min(r['duration_seconds'], top)  # the rest above the top
        total = shown / top * (height - 10)
        job = min(r['job_seconds'], shown) / top * (height - 10)
        tip = (
            f'micro-batch {r["micro_batch"]}: {r["duration_seconds"]:.3f} s '
            f'(Spark jobs {r["job_seconds"]:.3f} s), {r["elements_in"]} '
            f'elements in, lowest output watermark '
            f'{r["lowest_output_watermark"]}'
        )
        out.append(
            f'<g><title>{html.escape(tip)}</title>'
            f'<rect x="{x}" y="{height - total:.1f}" width="{bar}" '
            f'height="{total - job:.1f}" fill="#9cc3e6"/>'
            f'<rect x="{x}" y="{height - job:.1f}" width="{bar}" '
            f'height="{job:.1f}" fill="#2b6cb0"/></g>'
        )
    out.append(
        _text(
            50,
            height + 22,
            f'micro-batches {recent[0]["micro_batch"]}'
            f'-{recent[-1]["micro_batch"]}: dark = Spark jobs, '
            'light = driver',
            'axis',
        )
    )
    out.append('</svg>')
    return '\n'.join(out)


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
svg text { font-family: ui-monospace, monospace; font-size: 12px; }
svg text.name { font-weight: bold; }
svg text.axis { fill: #666; font-size: 11px; }
.facts td { padding: 0 1.2em 0 0; }
"""


def page(
    location: str, record: dict | None, written: float | None, refresh: float | None = None
) -> str:
    """The page for a checkpoint's newest commit record (``status.read``)."""
    meta = f'<meta http-equiv="refresh" content="{max(1, round(refresh))}">' if refresh else ''
    title = f'Stream status: {html.escape(location)}'
    head = (
        f'<!DOCTYPE html><html><head><meta charset="utf-8">{meta}'
        f'<title>{title}</title><style>{_STYLE}</style></head><body>'
        f'<h1>{title}</h1>'
    )
    if record is None:
        return head + '<p>No micro-batch committed yet.</p></body></html>'
    written = time.time() if written is None else written  # ``read`` gives both or neither
    latest, recent = progress_of(record)
    facts = [
        ('micro-batch', latest['micro_batch']),
        (
            'committed',
            f'{latest.get("timestamp", "?")} ({human_seconds(time.time() - written)} ago)',
        ),
    ]
    if drain_state(record):
        facts.append(('drain', drain_state(record)))
    if 'duration_seconds' in latest:
        b = latest['backlog']
        facts += [
            (
                'duration',
                f'{latest["duration_seconds"]:.3f} s (Spark jobs '
                f'{latest["job_seconds"]:.3f} s, driver '
                f'{latest["driver_seconds"]:.3f} s)',
            ),
            ('elements in', f'{latest["elements_in"]} ({latest.get("elements_per_second")}/s)'),
            ('state', f'{latest["state_keys"]} keys, {human_bytes(latest["state_bytes"])}'),
            (
                'backlog',
                f'{b["timer_buckets"]} state buckets with timers, '
                f'{b["due_residuals"]} of {b["pending_residuals"]} '
                f'residuals due, {b["held_side_input_elements"]} '
                'elements held behind side inputs',
            ),
        ]
    rows = ''.join(
        f'<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>' for k, v in facts
    )
    return (
        head + f'<table class="facts">{rows}</table>'
        f'<h2>Stages</h2>{stages_svg(latest["stages"], written)}'
        f'<h2>Recent micro-batches</h2>{durations_svg(recent)}'
        '</body></html>'
    )
