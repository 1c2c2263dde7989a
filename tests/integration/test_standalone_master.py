"""``--spark_master=spark://HOST:PORT`` against a real standalone master
(Spark's own ``deploy.master.Master``, started from the installed PySpark on
127.0.0.1): its RPC port passes the runner's check, its web UI port is
refused at once, naming the master, the option and what answered
(``spark.master_probe``)."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import time

import pytest

from beam_spark_inproc.errors import SparkMasterError
from beam_spark_inproc.spark.session import check_master


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


@pytest.fixture(scope='module')
def standalone_master(tmp_path_factory):
    """(RPC port, web UI port) of a standalone master on 127.0.0.1."""
    import pyspark

    home = pathlib.Path(pyspark.__file__).parent
    spark_class = home / 'bin' / 'spark-class'
    if not spark_class.exists():
        pytest.skip(f'this PySpark has no bin/spark-class to start a master with ({home})')
    logs = tmp_path_factory.mktemp('master')
    rpc, ui = _free_port(), _free_port()
    env = dict(
        os.environ,
        SPARK_HOME=str(home),
        SPARK_LOCAL_IP='127.0.0.1',  # the web UI binds there too, not 0.0.0.0
        SPARK_LOG_DIR=str(logs),
        SPARK_MASTER_OPTS='-Dspark.master.rest.enabled=false',
    )
    log = open(logs / 'master.log', 'w')
    process = subprocess.Popen(
        [
            str(spark_class),
            'org.apache.spark.deploy.master.Master',
            '--host',
            '127.0.0.1',
            '--port',
            str(rpc),
            '--webui-port',
            str(ui),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while 'I have been elected leader' not in (logs / 'master.log').read_text():
            assert process.poll() is None, (logs / 'master.log').read_text()
            assert time.monotonic() < deadline, (logs / 'master.log').read_text()
            time.sleep(0.5)
        yield rpc, ui
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)
        log.close()


def test_the_masters_rpc_port_passes(standalone_master):
    rpc, _ = standalone_master
    check_master(f'spark://127.0.0.1:{rpc}')


def test_the_masters_web_ui_port_is_refused_naming_it(standalone_master):
    _, ui = standalone_master
    master = f'spark://127.0.0.1:{ui}'
    with pytest.raises(SparkMasterError) as raised:
        check_master(master)
    text = str(raised.value)
    assert text.startswith(f'--spark_master={master!r} is not a Spark master: ')
    assert re.search(rf"127\.0\.0\.1:{ui}: an HTTP server \('HTTP/1\.1 \d+", text), text
