"""``io.text_lines.read_lines`` against Beam's own ``_TextSource.read_records``:
the same lines from the same ranges, the same claims on the range tracker, at
every split point of files with ``\\n``, ``\\r\\n``, lone ``\\r``, empty lines,
no final newline, multi-byte UTF-8 and empty files; and which sources it
takes."""

from __future__ import annotations

import gzip
import random

import pytest
from apache_beam.io import textio
from apache_beam.io.range_trackers import OffsetRangeTracker

from beam_spark_inproc.io import text_lines


def _files() -> dict[str, bytes]:
    rng = random.Random(7)
    pieces = [
        b'a',
        b'bc',
        b' ',
        b'\n',
        b'\r\n',
        b'\r',
        b'\r\r\n',
        'é'.encode(),
        '日本'.encode(),
        '€'.encode(),
        b'\n\n',
    ]
    mixed = b''.join(rng.choice(pieces) for _ in range(300))
    return {
        'empty': b'',
        'one_newline': b'\n',
        'lf': b'a\nbb\n\nccc\n',
        'crlf_no_final': b'a\r\nb\r\n\r\nc',
        'lone_cr': b'x\ry\n\rz\r',
        'newlines': b'\n\n\n',
        'cr_crlf': b'\r\r\n\r\n\r',
        'utf8': 'héllo wörld\n日本語\r\n€uro\n\nñ'.encode(),
        'mixed': mixed,
        'mixed_lf': mixed + b'\n',
    }


FILES = _files()


def _source(path: str) -> textio._TextSource:
    """The text source of exactly Beam's default ``ReadFromText``."""
    return textio.ReadFromText(path, validate=False)._source


def _read(reader, source, path, start, stop, split_after=None, split_at=None):
    tracker = OffsetRangeTracker(start, stop)
    out = []
    for i, line in enumerate(reader(source, path, tracker)):
        out.append(line)
        if split_after is not None and i == split_after:
            out.append(('split', tracker.try_split(split_at)))
    return out, (
        tracker.start_position(),
        tracker.stop_position(),
        tracker._last_record_start,
        tracker._last_attempted_record_start,
        tracker._offset_of_last_split_point,
        tracker.split_points(),
    )


def _beams(source, path, tracker):
    return source.read_records(path, tracker)


def _ours(source, path, tracker):
    return text_lines.read_lines(source, path, tracker)


@pytest.mark.parametrize('name', sorted(FILES))
def test_same_lines_and_claims_at_every_split_point(tmp_path, name):
    data = FILES[name]
    path = str(tmp_path / f'{name}.txt')
    with open(path, 'wb') as f:
        f.write(data)
    source = _source(path)
    for bundle in source.split(1 << 30):  # none for an empty file
        assert text_lines.plain_text(bundle.source)
    size = len(data)
    whole = _read(_beams, source, path, 0, size)
    assert _read(_ours, source, path, 0, size) == whole
    for cut in range(size + 1):
        first = _read(_beams, source, path, 0, cut)
        second = _read(_beams, source, path, cut, size)
        assert first[0] + second[0] == whole[0]  # Beam's own pieces tile
        assert _read(_ours, source, path, 0, cut) == first, cut
        assert _read(_ours, source, path, cut, size) == second, cut
    # The runner's split of a running range (worker.sdf): after the k-th line,
    # a split at an offset; both readers stop at the same line.
    for split_after in range(min(len(whole[0]), 12)):
        for split_at in range(0, size + 1, max(1, size // 25)):
            assert _read(_ours, source, path, 0, size, split_after, split_at) == _read(
                _beams, source, path, 0, size, split_after, split_at
            )


def test_only_beams_default_plain_text(tmp_path):
    plain = tmp_path / 'a.txt'
    plain.write_bytes(b'a\nb\n')
    packed = tmp_path / 'a.txt.gz'
    packed.write_bytes(gzip.compress(b'a\nb\n'))

    def single(read):
        return next(iter(read._source.split(1 << 30))).source

    assert text_lines.plain_text(single(textio.ReadFromText(str(plain))))
    for read in (
        textio.ReadFromText(str(packed)),
        textio.ReadFromText(str(plain), compression_type='gzip'),
        textio.ReadFromText(str(plain), skip_header_lines=1),
        textio.ReadFromText(str(plain), delimiter=b';'),
        textio.ReadFromText(str(plain), escapechar=b'\\'),
        textio.ReadFromText(str(plain), strip_trailing_newlines=False),
        textio.ReadFromTextWithFilename(str(plain)),
    ):
        assert text_lines.plain_text(single(read)) is None, read
