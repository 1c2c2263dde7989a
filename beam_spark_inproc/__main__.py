"""``python -m beam_spark_inproc {run,explain,status,drain} ...``.

* ``run SCRIPT [pipeline args]``: runs SCRIPT on InProcessSparkRunner (adds
  ``--runner`` unless given).
* ``explain SCRIPT [pipeline args]``: runs SCRIPT up to its first pipeline's
  ``run()``, then prints the plan (fused stages, shuffles, side inputs, the
  Beam transforms each Spark step runs) instead of executing it.
* ``status CHECKPOINT_LOCATION [--watch [SECONDS]] [--html FILE] [--json]``: a
  stream's progress from its commit records, running or stopped
  (``beam_spark_inproc.status``).
* ``drain CHECKPOINT_LOCATION [--wait SECONDS]``: drains the stream running on
  that checkpoint location (``execution.streaming.drain``).

``--help`` after SCRIPT lists the runner's pipeline options with their help
(``SparkRunnerOptions``) without running SCRIPT: Beam's ``PipelineOptions``
answers ``--help`` with an empty usage line, so a script never shows them.

The parser is ``flags.command_parser``, which imports no Beam: every
``--help`` answers at once, and Beam is imported when SCRIPT runs.
"""

from __future__ import annotations

import os
import runpy
import sys

from beam_spark_inproc import flags

RUNNER_FLAG = flags.RUNNER_FLAG


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ['status']:
        from beam_spark_inproc.status import main as status

        return status(argv[1:])
    if argv[:1] == ['drain']:
        from beam_spark_inproc.execution.streaming import drain

        return drain.main(argv[1:])
    args = flags.command_parser().parse_args(argv)
    script_args = list(args.args)
    if any(a in ('-h', '--help') for a in script_args):
        print(flags.runner_options_help(f'{flags.PROG} {args.command} {args.script}'))
        print(
            "Beam's own pipeline options (--streaming, ...) apply too; "
            f"{args.script}'s own flags: python {args.script} --help"
        )
        return 0
    if not os.path.isfile(args.script):
        print(f'{flags.PROG} {args.command}: {args.script}: no such file', file=sys.stderr)
        return 2
    from beam_spark_inproc.runner import EXPLAIN_ENV
    from beam_spark_inproc.runner import Explained

    if not any(a == '--runner' or a.startswith('--runner=') for a in script_args):
        script_args.append(RUNNER_FLAG)
    sys.argv = [args.script] + script_args
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.script)))
    if args.command == 'explain':
        os.environ[EXPLAIN_ENV] = '1'
    from beam_spark_inproc.errors import SparkMasterError

    try:
        runpy.run_path(args.script, run_name='__main__')
    except Explained as explained:
        print(explained.text)
        return 0
    except SparkMasterError as e:
        # Where the script stood says nothing about a master: the message alone.
        print(f'{flags.PROG} {args.command}: SparkMasterError: {e}', file=sys.stderr)
        return 1
    if args.command == 'explain':
        print(f'{args.script} ran no pipeline on InProcessSparkRunner.', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
