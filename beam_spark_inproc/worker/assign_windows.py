"""WindowInto with Beam's FixedWindows or SlidingWindows, in integer microseconds.

Beam's SDK runs a WindowInto in the bundle as a DoFn
(``bundle_processor.create_assign_windows``): per element and window a
``WindowIntoDoFn`` call through the DoFn runner, whose ``FixedWindows.assign``
/ ``SlidingWindows.assign`` compute with ``Timestamp`` and ``Duration``
objects (four or more of them per element, each a Python object with its own
arithmetic): the largest share of a windowed stage's time in a profile of the
streaming benchmark's windowed count (17 of 50 profiled seconds).

Where a WindowInto's WindowFn is exactly Beam's ``FixedWindows`` or
``SlidingWindows`` (a user's subclass reaches the worker as its base class
anyway: both define their runner API form, which a subclass inherits), the
planner gives the transform ``plan.ASSIGN_WINDOWS_URN`` instead of Beam's
(same payload, the WindowingStrategy), and this module's operation assigns
the windows from the element's timestamp in microseconds, with Beam's own
formulas on integers (``start = t - (t - offset) % size``), building Beam's
own ``IntervalWindow`` from ``Timestamp(micros=...)`` as Beam's arithmetic
does (so even a window beyond the int64 range is clamped the same way). A
window is made once per start: consecutive elements of one window share the
window object (windows are values; a fresh list holds them per element).

What the DoFn runner does around Beam's DoFn is kept: an element in N windows
gives N output elements (the DoFn is called per window), each in the windows
its timestamp falls into, with an unknown pane (a new ``WindowedValue``); the
operation's process time is measured as a DoFn's is. Any other WindowFn (or
a window size, period or offset Beam's formulas would not give meaning to)
gets Beam's own operation.
"""

from __future__ import annotations

from typing import Callable
from typing import Optional

from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.common import NameContext
from apache_beam.runners.worker import bundle_processor
from apache_beam.runners.worker import operation_specs
from apache_beam.runners.worker import operations
from apache_beam.transforms.core import Windowing
from apache_beam.transforms.window import FixedWindows
from apache_beam.transforms.window import IntervalWindow
from apache_beam.transforms.window import SlidingWindows
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import create

from beam_spark_inproc.planning import plan as p

# Windows kept per assigner (by start): a stream's windows move on, so the
# cache is cleared when full.
_CACHED_STARTS = 4096


def _window(start: int, end: int) -> IntervalWindow:
    return IntervalWindow(Timestamp(micros=start), Timestamp(micros=end))


class FixedAssigner:
    """``FixedWindows.assign`` on a timestamp in microseconds."""

    def __init__(self, windowfn: FixedWindows):
        self.size = windowfn.size.micros
        self.offset = windowfn.offset.micros
        self._start: Optional[int] = None
        self._window: Optional[IntervalWindow] = None

    def __call__(self, micros: int) -> list:
        start = micros - (micros - self.offset) % self.size
        if start != self._start:
            self._window = _window(start, start + self.size)
            self._start = start
        return [self._window]


class SlidingAssigner:
    """``SlidingWindows.assign`` on a timestamp in microseconds."""

    def __init__(self, windowfn: SlidingWindows):
        self.size = windowfn.size.micros
        self.period = windowfn.period.micros
        self.offset = windowfn.offset.micros
        self._windows: dict[tuple[int, int], tuple] = {}

    def __call__(self, micros: int) -> list:
        start = micros - (micros - self.offset) % self.period
        # Beam's windows start at ``start - k * period`` for each k >= 0 with
        # ``start - k * period > micros - size``: their number depends on how
        # far past ``start`` the timestamp is.
        count = -((micros - start - self.size) // self.period)
        key = (start, count)
        windows = self._windows.get(key)
        if windows is None:
            if len(self._windows) >= _CACHED_STARTS:
                self._windows.clear()
            size = self.size
            windows = self._windows[key] = tuple(
                _window(s, s + size) for s in range(start, micros - size, -self.period)
            )
        return list(windows)


def assigner(windowfn) -> Optional[Callable[[int], list]]:
    """The integer assignment for exactly Beam's FixedWindows or
    SlidingWindows with parameters Beam normalised, else None."""
    if type(windowfn) is FixedWindows:  # pylint: disable=unidiomatic-typecheck
        if windowfn.size.micros > 0 and 0 <= windowfn.offset.micros < windowfn.size.micros:
            return FixedAssigner(windowfn)
    elif type(windowfn) is SlidingWindows:  # pylint: disable=unidiomatic-typecheck
        if (
            windowfn.size.micros > 0
            and windowfn.period.micros > 0
            and 0 <= windowfn.offset.micros < windowfn.period.micros
        ):
            return SlidingAssigner(windowfn)
    return None


class AssignWindowsOperation(operations.Operation):
    """A WindowInto: each element (per window it was in) into the windows of
    its timestamp."""

    def __init__(
        self, name_context, spec, counter_factory, state_sampler, assign: Callable[[int], list]
    ):
        super().__init__(name_context, spec, counter_factory, state_sampler)
        self._assign = assign

    def process(self, o) -> None:
        with self.scoped_process_state:
            micros = o.timestamp_micros
            for _ in range(len(o.windows)):
                self.output(create(o.value, micros, self._assign(micros)))


def _assign_windows(
    factory,
    transform_id,
    transform_proto,
    strategy: beam_runner_api_pb2.WindowingStrategy,
    consumers,
):
    windowing = Windowing.from_runner_api(strategy, factory.context)
    assign = assigner(windowing.windowfn)
    if assign is None:
        return bundle_processor.create_assign_windows(
            factory, transform_id, transform_proto, strategy, consumers
        )
    return factory.augment_oldstyle_op(
        AssignWindowsOperation(
            NameContext(transform_proto.unique_name, transform_id),
            operation_specs.WorkerFlatten(None, [factory.get_only_output_coder(transform_proto)]),
            factory.counter_factory,
            factory.state_sampler,
            assign,
        ),
        transform_proto.unique_name,
        consumers,
    )


bundle_processor.BeamTransformFactory.register_urn(
    p.ASSIGN_WINDOWS_URN, beam_runner_api_pb2.WindowingStrategy
)(_assign_windows)
