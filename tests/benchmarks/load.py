"""A CPU-bound process beside a benchmark's runs: how an engine holds up when
the machine is not its own.

``run.py --load-burner`` runs every engine twice per repeat, once quiet and
once with a ``CpuBurner`` spinning (a ``python -c`` loop: one runnable thread
that never sleeps, as a second user's job on the same cores).
The burner is started once and paused (SIGSTOP) between loaded runs, so a run
does not pay for its start; its CPU is left out of every run's figures
(``Sampler`` skips ``CpuBurner.pids``).

On a machine with C cores an engine that keeps one core busy (the in-memory
FnApiRunner) loses nothing to one burner while C >= 2; an engine that keeps all
C cores busy gets about C / (C + 1) of them: on 2 cores its parallel part runs
1.5 times slower, its serial part (the driver's planning, a Spark job's
set-up) not at all. The loaded ratio over the quiet one, per engine pair, is
what ``report_load`` prints; CPU seconds per process kind show whether an
engine also does more work under load (spinning, retries) or only waits.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Optional

# Spins until its parent is gone (a benchmark killed mid-run leaves no burner).
_SPIN = (
    'import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n'
    '    for _ in range(100000): pass'
)


class CpuBurner:
    """One busy process, paused until ``on()``, ended by ``close()``."""

    pids: set = set()  # burners alive in this process: not any engine's CPU

    def __init__(self):
        self._process: Optional[subprocess.Popen] = None
        self._running = False

    def _start(self) -> subprocess.Popen:
        process = subprocess.Popen([sys.executable, '-c', _SPIN], stdin=subprocess.DEVNULL)
        CpuBurner.pids.add(process.pid)
        return process

    def on(self) -> None:
        if self._process is None:
            self._process = self._start()
            time.sleep(0.05)  # interpreter start-up, before the clock
        else:
            os.kill(self._process.pid, signal.SIGCONT)
        self._running = True

    def off(self) -> None:
        if self._process is not None and self._running:
            os.kill(self._process.pid, signal.SIGSTOP)
        self._running = False

    def cpu_seconds(self) -> float:
        """The burner's CPU seconds so far (0 before it started)."""
        if self._process is None:
            return 0.0
        try:
            with open(f'/proc/{self._process.pid}/stat') as f:
                raw = f.read()
        except OSError:
            return 0.0
        fields = raw[raw.rindex(')') + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')

    def close(self) -> None:
        if self._process is None:
            return
        pid = self._process.pid
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        self._process.kill()
        self._process.wait()
        CpuBurner.pids.discard(pid)
        self._process = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


LOADED = '+load'


def loaded(engine: str) -> str:
    """The name of ``engine``'s runs with the burner on."""
    return engine + LOADED


def is_loaded(name: str) -> bool:
    return name.endswith(LOADED)


def base(name: str) -> str:
    return name[: -len(LOADED)] if is_loaded(name) else name


def report_load(results: list, engines) -> list[str]:
    """Quiet and loaded ratios of this runner to each other engine, per
    pipeline and size, and how much the loaded one is worse (1.00: as quiet)."""
    others = [e for e in engines if e != 'inproc' and not is_loaded(e) and loaded(e) in engines]
    if 'inproc' not in engines or loaded('inproc') not in engines or not others:
        return []
    lines = [
        '### Quiet and with a CPU burner beside the run',
        '',
        "Ratios of this runner's median wall time to the other engine's, "
        'quiet and with one busy process beside the run (`--load-burner`); '
        '"worse" is loaded over quiet (1.30 is the limit the targets set).',
        '',
        '| pipeline | N | engine | quiet ratio | loaded ratio | worse | '
        'this runner loaded / quiet | engine loaded / quiet |',
        '|---|---|---|---:|---:|---:|---:|---:|',
    ]

    def median(cell):
        return cell.median if cell is not None else None

    for bench, n, cells, _ in results:
        me, me_l = median(cells.get('inproc')), median(cells.get(loaded('inproc')))
        for other in others:
            o, o_l = median(cells.get(other)), median(cells.get(loaded(other)))
            if None in (me, me_l, o, o_l) or not o or not o_l or not me:
                continue
            quiet, heavy = me / o, me_l / o_l
            lines.append(
                f'| {bench.name} | {n:,} | {other} | {quiet:.2f}x | '
                f'{heavy:.2f}x | {heavy / quiet:.2f} | {me_l / me:.2f} | '
                f'{o_l / o:.2f} |'
            )
    lines.append('')
    return lines
