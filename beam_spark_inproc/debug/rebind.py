"""Debug mode: user functions unpickled by value see the driver's module globals.

Beam pickles DoFns into the pipeline and the bundle unpickles copies. Functions
that cloudpickle cannot reference by name (lambdas, nested functions, anything
defined in ``__main__``) travel by value, with a copy of the globals they use,
so on any runner their writes to a module global never reach the driver's
module. In debug mode the bundle runs in the driver, where the real module is
at hand: while ``driver_globals()`` is active, what Beam unpickles (a DoFn or
CombineFn and its arguments) has its functions rebuilt over the globals of the
module they were defined in; so are the methods of user classes unpickled by
value (Beam's own classes are left alone).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import types

from apache_beam.internal import pickler
from apache_beam.transforms import userstate
from apache_beam.transforms.core import CombineFn
from apache_beam.transforms.core import DoFn

_lock = threading.Lock()
_depth = 0
_original_loads = pickler.loads
_MAX_DEPTH = 4


def _function(f: types.FunctionType, memo: dict, depth: int) -> types.FunctionType:
    # The memo holds the original too: once a cell drops it, its id could be
    # reused by another function within this same pass.
    if id(f) in memo:
        return memo[id(f)][1]
    memo[id(f)] = (f, f)
    # Beam's wrappers (Map, FlatMap...) hold the user's function in a closure
    # cell; the cells are the unpickled copy's own, so they can be updated.
    for cell in f.__closure__ or ():
        try:
            contents = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        updated = rebind(contents, memo, depth + 1)
        if updated is not contents:
            cell.cell_contents = updated
    module = sys.modules.get(f.__module__ or '')
    if module is None or f.__globals__ is vars(module):
        return f
    rebound = types.FunctionType(
        f.__code__, vars(module), f.__name__, f.__defaults__, f.__closure__
    )
    rebound.__kwdefaults__ = f.__kwdefaults__
    rebound.__qualname__ = f.__qualname__
    rebound.__annotations__ = f.__annotations__
    rebound.__dict__.update(f.__dict__)
    memo[id(f)] = (f, rebound)
    return rebound


def rebind(obj, memo: dict | None = None, depth: int = 0):
    """``obj`` with its user functions over their modules' real globals."""
    memo = {} if memo is None else memo
    if depth > _MAX_DEPTH:
        return obj
    if isinstance(obj, types.FunctionType):
        return _function(obj, memo, depth)
    if type(obj) is tuple:
        return tuple(rebind(x, memo, depth + 1) for x in obj)
    if type(obj) is list:
        obj[:] = [rebind(x, memo, depth + 1) for x in obj]
    elif type(obj) is dict:
        for key, value in obj.items():
            obj[key] = rebind(value, memo, depth + 1)
    elif isinstance(obj, (DoFn, CombineFn)) and hasattr(obj, '__dict__'):
        for key, value in vars(obj).items():
            vars(obj)[key] = rebind(value, memo, depth + 1)
        _methods(type(obj), memo, depth)
        if isinstance(obj, DoFn):
            _timer_callbacks(obj, memo)
    return obj


def _timer_callbacks(dofn: DoFn, memo: dict) -> None:
    """A TimerSpec names its ``on_timer`` method by the function object, and
    Beam's validation checks it is the class's method: where that method was
    rebound, so is the spec's callback."""
    try:
        _, timer_specs = userstate.get_dofn_specs(dofn)
    except ValueError:  # an invalid DoFn: Beam's own validation says why
        return
    for spec in timer_specs:
        callback = spec._attached_callback
        if callback is not None and id(callback) in memo:
            spec._attached_callback = memo[id(callback)][1]


def _methods(cls: type, memo: dict, depth: int) -> None:
    """Methods of a user class unpickled by value (a copy: only functions whose
    globals are not their module's are replaced, so Beam's and importable
    classes are left as they are)."""
    for klass in cls.__mro__:
        if klass.__module__.startswith('apache_beam.') or klass is object:
            continue
        for name, attr in list(vars(klass).items()):
            if isinstance(attr, types.FunctionType):
                rebound = _function(attr, memo, depth + 1)
                if rebound is not attr:
                    setattr(klass, name, rebound)


def _loads(*args, **kwargs):
    return rebind(_original_loads(*args, **kwargs))


@contextlib.contextmanager
def driver_globals():
    """Patches Beam's ``pickler.loads`` (through which bundles unpickle user
    code) while a debug-mode stage runs; re-entrant."""
    global _depth
    with _lock:
        _depth += 1
        pickler.loads = _loads
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if not _depth:
                pickler.loads = _original_loads
