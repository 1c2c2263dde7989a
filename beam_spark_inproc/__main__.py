"""``python -m beam_spark_inproc explain|run SCRIPT [pipeline args]``.

* ``explain``: runs SCRIPT up to its first pipeline's ``run()``, then prints the
  plan (fused stages, shuffles, side inputs, the Beam transforms each Spark step
  runs) instead of executing it.
* ``run``: runs SCRIPT on InProcessSparkRunner (adds ``--runner`` unless given).
* ``status CHECKPOINT_LOCATION [--watch [SECONDS]] [--html FILE] [--json]``: a
  stream's progress from its commit records, running or stopped
  (``beam_spark_inproc.status``).

``python -m beam_spark_inproc drain CHECKPOINT_LOCATION [--wait SECONDS]``
drains the stream running on that checkpoint location
(``execution.streaming.drain``).

``--help`` after SCRIPT lists the runner's pipeline options with their help
(``SparkRunnerOptions``) without running SCRIPT: Beam's ``PipelineOptions``
answers ``--help`` with an empty usage line, so a script never shows them.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys

RUNNER_FLAG = '--runner=beam_spark_inproc.InProcessSparkRunner'


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ['status']:
        from beam_spark_inproc.status import main as status

        return status(argv[1:])
    if argv[:1] == ['drain']:
        from beam_spark_inproc.execution.streaming import drain

        return drain.main(argv[1:])
    parser = argparse.ArgumentParser(
        prog='python -m beam_spark_inproc',
        description=__doc__.splitlines()[0].replace('explain|run', 'explain|run|status'),
        epilog=options_help('python -m beam_spark_inproc explain|run SCRIPT'),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument('command', choices=['explain', 'run'])
    parser.add_argument('script', help='a Python file that builds and runs a pipeline')
    parser.add_argument(
        'args', nargs=argparse.REMAINDER, help='arguments for the script (pipeline options)'
    )
    args = parser.parse_args(argv)
    from beam_spark_inproc.runner import EXPLAIN_ENV
    from beam_spark_inproc.runner import Explained

    script_args = list(args.args)
    if any(a in ('-h', '--help') for a in script_args):
        print(options_help(f'python -m beam_spark_inproc {args.command} {args.script}'))
        print(
            "Beam's own pipeline options (--streaming, ...) apply too; "
            f"{args.script}'s own flags: python {args.script} --help"
        )
        return 0
    if not any(a == '--runner' or a.startswith('--runner=') for a in script_args):
        script_args.append(RUNNER_FLAG)
    sys.argv = [args.script] + script_args
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.script)))
    if args.command == 'explain':
        os.environ[EXPLAIN_ENV] = '1'
    try:
        runpy.run_path(args.script, run_name='__main__')
    except Explained as explained:
        print(explained.text)
        return 0
    if args.command == 'explain':
        print(f'{args.script} ran no pipeline on InProcessSparkRunner.', file=sys.stderr)
        return 1
    return 0


def options_help(prog: str) -> str:
    """The runner's pipeline options (``SparkRunnerOptions``) with their help."""
    from beam_spark_inproc.options import SparkRunnerOptions

    parser = argparse.ArgumentParser(
        prog=prog,
        add_help=False,
        usage=f'{prog} [InProcessSparkRunner options]',
        description="InProcessSparkRunner's pipeline options:",
    )
    SparkRunnerOptions._add_argparse_args(parser)
    return parser.format_help()


if __name__ == '__main__':
    sys.exit(main())
