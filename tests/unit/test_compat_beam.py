"""compat.beam: each flag and function is right for the installed Beam, and a
Beam outside the supported range is refused in one line.

Each flag is decided by a feature test of the installed Beam; the tests below
check it twice more: against the release that introduced the difference (read
from Beam's own sources of each release, ``FIRST_RELEASE``) and by using it,
so a wrong flag fails here on the Beam it is wrong for.
"""

from __future__ import annotations

import datetime
import subprocess
import sys
import typing

import pytest
from apache_beam.coders import RowCoder
from apache_beam.coders import coders
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.common import NameContext
from apache_beam.runners.worker import bundle_processor
from apache_beam.runners.worker import operations
from apache_beam.runners.worker import statesampler
from apache_beam.typehints import schemas
from apache_beam.utils.counters import CounterFactory
from apache_beam.utils.timestamp import Timestamp

from beam_spark_inproc.compat import beam as beam_compat
from beam_spark_inproc.errors import UnsupportedBeamVersion
from beam_spark_inproc.worker.channel import ChannelFactory
from beam_spark_inproc.worker.channel import InProcessDataChannel

# The first Beam release with each newer behaviour, from Beam's sources.
FIRST_RELEASE = {
    'OPERATIONS_TAKE_CHANNEL_FACTORY': (2, 77),
    'TIMESTAMPS_HAVE_PRECISION': (2, 76),
    '_OPTIONS_COMPARE_COMPAT_VERSION': (2, 72),
}


@pytest.mark.parametrize('flag', sorted(FIRST_RELEASE))
def test_flag_matches_the_release_that_changed_it(flag):
    assert getattr(beam_compat, flag) == (beam_compat.VERSION[:2] >= FIRST_RELEASE[flag]), (
        flag,
        beam_compat.VERSION_STRING,
    )


def test_version_is_the_installed_beams():
    import apache_beam

    assert beam_compat.VERSION_STRING == apache_beam.__version__
    assert beam_compat.VERSION == beam_compat.parse_version(apache_beam.__version__)


# --- the floor and the ceiling -------------------------------------------------


@pytest.mark.parametrize(
    'text, parsed',
    [
        ('2.70.0', (2, 70, 0)),
        ('2.77.1', (2, 77, 1)),
        ('2.71.0rc2', (2, 71, 0)),
        ('2.74', (2, 74, 0)),
    ],
)
def test_supported_versions_pass(text, parsed):
    assert beam_compat.check_version(text) == parsed


@pytest.mark.parametrize('text', ['2.69.0', '2.60.0', '2.78.0', '2.78.0.dev', '3.0.0', '1.99.0'])
def test_unsupported_versions_fail_in_one_line(text):
    with pytest.raises(UnsupportedBeamVersion) as raised:
        beam_compat.check_version(text)
    message = str(raised.value)
    assert '\n' not in message
    assert f'found apache-beam {text}' in message
    assert beam_compat.SUPPORTED_RANGE in message
    assert isinstance(raised.value, ImportError)


def test_an_unreadable_version_fails_in_one_line():
    with pytest.raises(UnsupportedBeamVersion, match="'unknown'"):
        beam_compat.check_version('unknown')


def test_the_range_and_its_text_agree():
    (low_major, low_minor), (high_major, high_minor) = beam_compat.SUPPORTED
    assert beam_compat.SUPPORTED_RANGE == f'>={low_major}.{low_minor},<{high_major}.{high_minor}'
    assert high_minor - low_minor == 8  # the last eight releases


_IMPORTS = """
import sys
import traceback

import apache_beam.version

real = apache_beam.version.__version__
for version in sys.argv[1:] + [real]:
    apache_beam.version.__version__ = version
    try:
        from beam_spark_inproc import InProcessSparkRunner  # noqa: F401
    except BaseException as e:
        print(version, traceback.format_exception_only(e)[-1].strip())
    else:
        print(version, 'imported')
"""


@pytest.fixture(scope='module')
def imports() -> dict[str, str]:
    """How importing the runner ends in a fresh interpreter whose Beam says
    it is 2.69.0, then 2.78.0, then what it is: version -> the last line."""
    done = subprocess.run(
        [sys.executable, '-c', _IMPORTS, '2.69.0', '2.78.0'],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return dict(line.split(' ', 1) for line in done.stdout.splitlines())


def test_the_runner_refuses_an_older_beam_when_imported(imports):
    # Refused in one line, before any of Beam's internals could fail in their own way.
    assert imports['2.69.0'] == (
        'beam_spark_inproc.errors.UnsupportedBeamVersion: beam-spark-inproc supports '
        f'apache-beam{beam_compat.SUPPORTED_RANGE}, found apache-beam 2.69.0: '
        f"pip install 'apache-beam{beam_compat.SUPPORTED_RANGE}'."
    )


def test_the_runner_refuses_a_newer_beam_when_imported(imports):
    assert imports['2.78.0'].startswith('beam_spark_inproc.errors.UnsupportedBeamVersion: ')
    assert 'found apache-beam 2.78.0' in imports['2.78.0']


def test_the_runner_imports_with_the_installed_beam(imports):
    assert imports[beam_compat.VERSION_STRING] == 'imported'


# --- the data channel of DATA_INPUT / DATA_OUTPUT operations ---------------------


class _Factory:
    """What ``data_channel_argument`` reads of Beam's ``BeamTransformFactory``."""

    def __init__(self):
        self.data_channel_factory = ChannelFactory()


def _output_operation(factory: _Factory, port) -> bundle_processor.DataOutputOperation:
    coder = coders.WindowedValueCoder(coders.BytesCoder(), coders.GlobalWindowCoder())
    return bundle_processor.DataOutputOperation(
        NameContext('out', 'out'),
        'out',
        {},
        CounterFactory(),
        statesampler.StateSampler('test', CounterFactory()),
        coder,
        transform_id='out',
        **beam_compat.data_channel_argument(factory, port),
    )


def test_operations_get_the_channel_of_the_current_bundle():
    """An operation built with ``data_channel_argument`` is accepted by this
    Beam's constructor (a wrong flag passes the other keyword: TypeError) and,
    as Beam's ``process_bundle`` reaches it, writes into each bundle's own
    channel."""
    factory = _Factory()
    port = beam_fn_api_pb2.RemoteGrpcPort()
    op = _output_operation(factory, port)
    assert isinstance(op, operations.Operation)
    rows: list[list] = [[], []]
    for bundle in (0, 1):
        factory.data_channel_factory.current = InProcessDataChannel(
            iter(()), lambda tag, key, data, b=bundle: rows[b].append(data), {'out': (7, 'x', None)}
        )
        # As BundleProcessor.process_bundle asks this Beam's operation for it.
        channel = (
            op.get_data_channel(None)
            if beam_compat.OPERATIONS_TAKE_CHANNEL_FACTORY
            else op.data_channel
        )
        stream = channel.output_stream(f'bundle-{bundle}', op.transform_id)
        stream.write(b'bundle %d' % bundle)
        stream.close()
    assert rows == [[b'bundle 0'], [b'bundle 1']]


# --- update_compatibility_version ----------------------------------------------


@pytest.mark.parametrize(
    'update, before, prior',
    [
        (None, '2.65.0', False),
        ('2.60.0', '2.65.0', True),
        ('2.65.0', '2.65.0', False),
        ('2.64', '2.65.0', True),
        ('2.70.0', '2.65.0', False),
    ],
)
def test_is_compat_version_prior_to(update, before, prior):
    options = PipelineOptions(update_compatibility_version=update) if update else PipelineOptions()
    assert beam_compat.is_compat_version_prior_to(options, before) is prior


# --- schema logical types ------------------------------------------------------


class _Dated(typing.NamedTuple):
    day: datetime.date


def test_date_urn_is_beams_type_for_dates():
    field_type = schemas.typing_to_runner_api(datetime.date)
    assert field_type.logical_type.urn == beam_compat.DATE_URN
    expected = (
        'beam:logical_type:date:v1'
        if beam_compat.VERSION[:2] >= (2, 73)
        else 'beam:logical_type:javasdk_date:v1'
    )
    assert beam_compat.DATE_URN == expected


def test_dates_cross_beams_row_coder():
    coder = RowCoder(schemas.named_tuple_to_schema(_Dated))
    for day in (datetime.date(1900, 3, 1), datetime.date(1970, 1, 1), datetime.date(9999, 12, 31)):
        assert coder.decode(coder.encode(_Dated(day))).day == day


# --- timestamps ----------------------------------------------------------------


def test_timestamp_precision():
    if beam_compat.TIMESTAMPS_HAVE_PRECISION:
        millis = Timestamp(1, 500, 3)
        assert millis == Timestamp(micros=1_500_000)
        assert millis.micros == 1_500_000
    else:
        with pytest.raises(TypeError):
            Timestamp(1, 500, 3)
        assert Timestamp(1, 500).micros == 1_000_500
