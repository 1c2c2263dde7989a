"""Run mypy over the package with the module names it has when installed.

``setup.cfg`` installs the ``transforms/`` directory as ``beam_spark_inproc.transforms``
(``package_dir``). mypy names a module after the directories above its file, so plain
``mypy transforms`` checks it as a package ``transforms`` and cannot resolve the
``beam_spark_inproc.transforms`` imports inside it and in the runner; no mypy setting
maps a directory to another package name. This script builds mypy's source list as
``mypy`` does (arguments and ``[tool.mypy]`` in pyproject.toml), renames the sources under
each ``package_dir`` entry to their installed names, and runs the same build, so every
module is checked once, under its own name, with the real file paths in the messages.

Usage (from the repository root): ``python .ci/typecheck.py [mypy options]``.
"""

from __future__ import annotations

import configparser
import os
import sys
import time

from mypy import util
from mypy.fscache import FileSystemCache
from mypy.main import process_options
from mypy.main import run_build
from mypy.modulefinder import BuildSource


def package_dirs(setup_cfg: str) -> dict[str, str]:
    """setup.cfg's ``package_dir``: the package name each directory is installed as."""
    config = configparser.ConfigParser()
    config.read(setup_cfg)
    mapping = {}
    for line in config.get('options', 'package_dir', fallback='').splitlines():
        if '=' in line:
            package, directory = (part.strip() for part in line.split('=', 1))
            mapping[directory.replace('/', '.')] = package
    return mapping


def installed_name(module: str, mapping: dict[str, str]) -> str:
    for source_name, package in mapping.items():
        if module == source_name or module.startswith(source_name + '.'):
            return package + module[len(source_name) :]
    return module


def main(args: list[str]) -> int:
    t0 = time.time()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    mapping = package_dirs(os.path.join(root, 'setup.cfg'))
    fscache = FileSystemCache()
    sources, options = process_options(args, fscache=fscache)
    sources = [
        BuildSource(s.path, installed_name(s.module, mapping), s.text, s.base_dir, s.followed)
        for s in sources
    ]
    _, messages, blockers = run_build(sources, options, fscache, t0, sys.stdout, sys.stderr)
    formatter = util.FancyFormatter(sys.stdout, sys.stderr, options.hide_error_codes)
    n_errors, n_notes, n_files = util.count_stats(messages)
    if n_errors:
        print(formatter.format_error(n_errors, n_files, len(sources), blockers=blockers))
        return 2 if blockers else 1
    print(formatter.format_success(len(sources), options.color_output))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
