"""A conftest for a user's test file run in a process of its own: at the end it
writes to ``$JVM_REPORT`` whether the process started Spark's JVM (a py4j
gateway, or a java process among its descendants). Used by
tests/integration/test_plugin.py and tests/benchmarks/user_tests.py."""

JVM_PROBE = """import json, os, sys

import pytest


def _java_descendants():
    parents = {}
    for pid in os.listdir('/proc'):
        if not pid.isdigit():
            continue
        try:
            with open(f'/proc/{pid}/stat') as f:
                parents[pid] = f.read().rsplit(')', 1)[1].split()[1]
        except OSError:
            continue
    found, todo = [], [str(os.getpid())]
    while todo:
        parent = todo.pop()
        for pid, ppid in parents.items():
            if ppid == parent:
                todo.append(pid)
                try:
                    with open(f'/proc/{pid}/cmdline', 'rb') as f:
                        if b'java' in f.read().split(b'\\0')[0]:
                            found.append(pid)
                except OSError:
                    pass
    return found


def pytest_sessionfinish(session):
    context = getattr(sys.modules.get('pyspark'), 'SparkContext', None)
    with open(os.environ['JVM_REPORT'], 'w') as f:
        json.dump({'gateway': bool(context and context._gateway),
                   'java': _java_descendants()}, f)
"""
