"""The pytest plugin's SparkSession: one per test process, made on demand.

``Sessions.for_master`` gives a test the process's ``OnDemandSession`` for a
master (``spark.session``): nothing starts until a pipeline's stage needs
Spark or the test itself uses the session, so a suite of tiny pipeline tests
never starts a JVM. A local master's session is the process's shared one
(``session.lazy_local_session``): a plain ``InProcessSparkRunner()`` in a
test finds the same session, started once. An active session (a user's
conftest made one) is used as it is.

A master Spark cannot have fails the test asking for it, at its setup, and
nothing else: a malformed URL or an unreachable standalone master
(``session.check_master``, before any JVM), or a second master in a process
whose session already runs (a process holds one Spark driver). A session
whose JVM fails to start raises in the test whose pipeline needed it; the
next test that needs Spark tries again.
"""

from __future__ import annotations

import functools
from typing import Any
from typing import Optional

from beam_spark_inproc.errors import SparkMasterError
from beam_spark_inproc.spark import session


class Sessions:
    def __init__(self) -> None:
        self._current: Optional[session.OnDemandSession] = None
        self._created: list[Any] = []  # sessions made here, stopped by ``stop``

    def for_master(self, master: str) -> session.OnDemandSession:
        """The process's session for ``master``; ``SparkMasterError`` where
        Spark cannot have it."""
        session.check_master(master)
        current = self._current
        if current is not None and not current.lazy.stopped:
            if current.master in (master, None):
                return current
            if current.created or current.lazy.starting:
                raise SparkMasterError(
                    f'Spark master {master!r}: this test process already runs a Spark session '
                    f'on {current.master!r}, and a process holds one. Run the tests that need '
                    f'{master!r} in a pytest process of their own (--spark-master).'
                )
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is not None:
            made = session.OnDemandSession(session.LazySession(lambda: active), None, None)
        else:
            create = functools.partial(self._create, master)
            cores = session.local_parallelism(master)
            lazy = session.lazy_local_session(create, master, None) if cores else None
            if lazy is None:
                lazy = session.LazySession(create, cores=cores)
            made = session.OnDemandSession(lazy, master, cores)
        self._current = made
        return made

    def _create(self, master: str):
        spark, created = session.get_or_create(master, None, {})
        if created:
            self._created.append(spark)
        return spark

    def stop(self) -> None:
        """Stops the sessions made here (one starting now first ends its start)."""
        current = self._current
        if current is not None and current.lazy.starting:
            try:
                current.lazy.get()
            except Exception:  # its start failed: nothing to stop
                pass
        for spark in self._created:
            try:
                spark.stop()
            except Exception:
                pass
        self._created.clear()
