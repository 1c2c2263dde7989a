"""Apache Beam's SDK internals where the supported releases differ.

The runner drives Beam's own ``BundleProcessor`` in Spark's Python workers and
reuses Beam's fusion phases, coders and pipeline utilities, so it depends on
parts of the SDK that are not public API and change between releases. This
module is the one place that knows how they differ; the rest of the package
imports the names below and never reads Beam's version itself.

Supported: the last eight Beam releases, ``SUPPORTED`` (2.70 up to, not
including, 2.78). The floor and the ceiling are checked when this module is
imported, i.e. when the runner is: a Beam outside them raises
``UnsupportedBeamVersion`` with one line naming the version found and the
range supported. A release past the ceiling is refused rather than tried
because each new release has changed the bundle processor's internals
(2.77 changed how operations reach their data channel).

What differs, the first release with the newer behaviour, and the name here
that decides it (a feature test of the installed Beam where one exists):

* ``OPERATIONS_TAKE_CHANNEL_FACTORY``, ``data_channel_argument`` (2.77): a
  DATA_INPUT/DATA_OUTPUT operation is given a ``data_channel_factory`` that
  it calls at every bundle (``process_bundle(data_stream_id=)``); before, one
  ``data_channel`` made while the processor was built. The worker's channel
  factory answers both with a channel that follows the current bundle
  (``worker.channel``), so a cached processor serves bundle after bundle.
* ``TIMESTAMPS_HAVE_PRECISION`` (2.76): a ``Timestamp`` carries a precision
  (``Timestamp(seconds, subseconds, precision)``: a DoFn may emit millisecond
  or nanosecond timestamps; ``.micros`` of a finer one raises); before, a
  ``Timestamp`` is an integer of microseconds, ``Timestamp(seconds, micros)``.
* ``is_compat_version_prior_to`` (2.72): a ``PipelineOptions`` method;
  before, a function of ``apache_beam.transforms.util``. With it,
  ``reshuffle_keeps_panes``: whether the pipeline's
  ``update_compatibility_version`` asks for a Reshuffle from before 2.65.
* ``DATE_URN`` (2.73): Beam's schema logical type for ``datetime.date`` is
  ``date``; before, ``javasdk_date``. Both carry ``datetime.date`` values.

The same in every supported release, though it moved before: the pipeline
utilities (``merge_common_environments``, ``validate_pipeline_graph``) are in
``runners.pipeline_utils`` (from 2.65; ``runners.common`` before).
"""

from __future__ import annotations

import datetime
import functools
import inspect
import re
from typing import Any

from apache_beam import version as _beam_version

from beam_spark_inproc.errors import UnsupportedBeamVersion

# The supported releases: from the first, up to (not including) the second.
SUPPORTED = ((2, 70), (2, 78))
SUPPORTED_RANGE = '>=2.70,<2.78'


def parse_version(text: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a Beam version string (``2.77.0``,
    ``2.78.0.dev``, ``2.71.0rc2``); a missing patch counts as 0."""
    match = re.match(r'(\d+)\.(\d+)(?:\.(\d+))?', text)
    if match is None:
        raise UnsupportedBeamVersion(
            f'beam-spark-inproc cannot read the Apache Beam version {text!r}; '
            f'it supports apache-beam{SUPPORTED_RANGE}.'
        )
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def check_version(text: str) -> tuple[int, int, int]:
    """The parsed version, or ``UnsupportedBeamVersion`` (one line: found,
    supported, what to install) when it is outside ``SUPPORTED``. A
    development build of the next release (``2.78.0.dev``) is outside."""
    version = parse_version(text)
    if not SUPPORTED[0] <= version[:2] < SUPPORTED[1]:
        raise UnsupportedBeamVersion(
            f'beam-spark-inproc supports apache-beam{SUPPORTED_RANGE}, found '
            f"apache-beam {text}: pip install 'apache-beam{SUPPORTED_RANGE}'."
        )
    return version


VERSION_STRING: str = _beam_version.__version__
VERSION = check_version(VERSION_STRING)

# The SDK internals are imported once the version is known to be supported:
# an older Beam would fail here with an ImportError naming a module instead.
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402
from apache_beam.runners.worker import bundle_processor  # noqa: E402
from apache_beam.typehints import schemas  # noqa: E402
from apache_beam.utils.timestamp import Timestamp  # noqa: E402

# --- the data channel of DATA_INPUT / DATA_OUTPUT operations (2.77) ------------

OPERATIONS_TAKE_CHANNEL_FACTORY: bool = (
    'data_channel_factory'
    in inspect.signature(bundle_processor.RunnerIOOperation.__init__).parameters
)


def data_channel_argument(factory: Any, grpc_port: Any) -> dict[str, Any]:
    """The keyword argument that gives a ``RunnerIOOperation`` (a DATA_INPUT
    or DATA_OUTPUT operation) its channel for ``grpc_port``, as Beam's own
    ``create_source_runner``/``create_sink_runner`` of this release pass it:
    ``factory`` is the ``BeamTransformFactory`` building the bundle's
    operations."""
    channels = factory.data_channel_factory
    if OPERATIONS_TAKE_CHANNEL_FACTORY:
        return {'data_channel_factory': functools.partial(channels.create_data_channel, grpc_port)}
    return {'data_channel': channels.create_data_channel(grpc_port)}


# --- timestamps (2.76) ------------------------------------------------------

TIMESTAMPS_HAVE_PRECISION: bool = 'precision' in inspect.signature(Timestamp.__init__).parameters


# --- update_compatibility_version (2.72) -------------------------------------

_OPTIONS_COMPARE_COMPAT_VERSION: bool = hasattr(PipelineOptions, 'is_compat_version_prior_to')


def is_compat_version_prior_to(options: PipelineOptions, version: str) -> bool:
    """Whether the pipeline's ``update_compatibility_version`` is set and
    earlier than ``version`` (then a transform keeps its behaviour from
    before that release), as Beam decides it."""
    if _OPTIONS_COMPARE_COMPAT_VERSION:
        return options.is_compat_version_prior_to(version)
    from apache_beam.transforms import util

    # By name: the type check reads one Beam, and from 2.72 util has no such function.
    return getattr(util, 'is_compat_version_prior_to')(options, version)  # noqa: B009


# Beam's Reshuffle carries each element's pane from this release on.
RESHUFFLE_PANES_VERSION = '2.65.0'


def reshuffle_keeps_panes(options: PipelineOptions) -> bool:
    """Whether a Reshuffle of this pipeline keeps its elements' panes: unless
    the pipeline asks for the behaviour of a Beam before 2.65 with
    ``update_compatibility_version`` (``plan.StagePlan.reset_panes``)."""
    return not is_compat_version_prior_to(options, RESHUFFLE_PANES_VERSION)


# --- schema logical types (2.73) ---------------------------------------------

# The URN of the schema logical type Beam gives ``datetime.date`` fields: its
# ``date`` (days since the epoch) from 2.73; before, ``javasdk_date``
# (``JdbcDateType``: the day's first millisecond, UTC). Both read and write
# ``datetime.date`` values.
DATE_URN: str = schemas.LogicalType.from_typing(datetime.date).urn()
