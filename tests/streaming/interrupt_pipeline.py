"""A stream whose micro-batches are slow, for the Ctrl-C tests, runnable as a
script (a driver to signal)::

    python -m tests.streaming.interrupt_pipeline MARKS CHECKPOINT ENGINE SECONDS

A TestStream of ``EVENTS`` elements, each followed by a watermark step, so
each micro-batch takes one element; ``Slow`` writes ``MARKS/started-I`` when
element I reaches it, sleeps SECONDS (inside the micro-batch's Spark job on
Spark), then writes ``MARKS/done-I``. ENGINE is ``debug`` (the in-driver
engine) or ``spark`` (``local[1]``). Logging is the default (WARNING): what it
prints is what a user sees. ``Driver`` runs it for a test.
"""

from __future__ import annotations

import glob
import os
import re
import signal
import subprocess
import sys
import threading
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_stream import TestStream

EVENTS = 40
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Seconds an element takes in the slow DoFn (tests): a micro-batch lasts that long.
SLOW = {'debug': 3.0, 'spark': 6.0}


class Slow(beam.DoFn):
    def __init__(self, marks: str, seconds: float):
        self._marks = marks
        self._seconds = seconds

    def process(self, element):
        open(os.path.join(self._marks, f'started-{element}'), 'w').close()
        time.sleep(self._seconds)
        open(os.path.join(self._marks, f'done-{element}'), 'w').close()
        yield element


def main(marks: str, checkpoint: str, engine: str, seconds: float) -> None:
    args = [
        '--runner=beam_spark_inproc.InProcessSparkRunner',
        '--streaming',
        f'--checkpoint_location={checkpoint}',
    ]
    args += ['--inproc_debug'] if engine == 'debug' else ['--spark_master=local[1]']
    stream = TestStream()
    for i in range(EVENTS):
        stream = stream.add_elements([i]).advance_watermark_to(i + 1)
    with beam.Pipeline(options=PipelineOptions(args)) as p:
        _ = p | stream | beam.ParDo(Slow(marks, seconds))


class Driver:
    """This pipeline run as a driver process in a process group of its own
    (for the tests), its output read as it comes."""

    def __init__(self, marks: str, checkpoint: str, engine: str):
        self.marks, self.checkpoint = marks, checkpoint
        self.process = subprocess.Popen(
            [
                sys.executable,
                '-m',
                'tests.streaming.interrupt_pipeline',
                marks,
                checkpoint,
                engine,
                str(SLOW[engine]),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own group: the test is not in it
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line.rstrip('\n'))

    def commits(self) -> list[int]:
        return sorted(
            int(os.path.basename(path)[: -len('.json')])
            for path in glob.glob(os.path.join(self.checkpoint, 'commits', '*.json'))
        )

    def marked(self, kind: str) -> set[int]:
        return {
            int(name.split('-')[1])
            for name in os.listdir(self.marks)
            if name.startswith(kind + '-')
        }

    def inside_a_micro_batch(self) -> int:
        """Waits until an element is inside the slow DoFn after a first
        commit; returns the newest commit then (the micro-batch under way is
        the next one: it cannot commit before the element's sleep ends)."""
        deadline = time.monotonic() + 240
        while True:
            commits = self.commits()
            if commits and self.marked('started') - self.marked('done'):
                return max(self.commits())
            assert self.process.poll() is None, '\n'.join(self.lines)
            assert time.monotonic() < deadline, 'the stream made no progress'
            time.sleep(0.05)

    def ctrl_c(self) -> None:
        """SIGINT to the driver's process group, as a terminal sends it."""
        os.killpg(self.process.pid, signal.SIGINT)

    def wait_for_line(self, pattern: str) -> None:
        deadline = time.monotonic() + 60
        while not any(re.search(pattern, line) for line in self.lines):
            assert self.process.poll() is None, '\n'.join(self.lines)
            assert time.monotonic() < deadline, '\n'.join(self.lines)
            time.sleep(0.05)

    def exit(self) -> int:
        try:
            code = self.process.wait(timeout=120)
        finally:
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGKILL)
        self._reader.join(10)
        return code

    def after(self, pattern: str) -> list[str]:
        """The lines from the first one matching ``pattern`` on."""
        for i, line in enumerate(self.lines):
            if re.search(pattern, line):
                return self.lines[i:]
        raise AssertionError('\n'.join(self.lines))


if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
