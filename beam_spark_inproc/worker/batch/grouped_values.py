"""Large groups' values served page by page, spilling to disk: GroupByKey output
that is iterated lazily instead of materialized as one Python list.

Beam's own mechanism is used (FnApiRunner's ``use_state_iterables``): the
consumer reads grouped values with a state-backed iterable coder (the planner
rewrites the coder, ``planning.phases``), so past its first
``phases.STATE_ITERABLE_BYTES`` a group's encoding holds a token instead of the
rest of its values. ``GroupedValuesStore.write`` is the coder's state writer: it
encodes the remaining values, as they are produced, into pages kept in memory
up to a budget and in a private temporary file beyond it. The SDK reads the
token back through the state API (``get_raw`` with continuation tokens), one
page at a time, each time the DoFn iterates (so the values are re-iterable),
and never holds more than a page. Pages live until the bundle ends
(``reset``): a DoFn may keep the iterable until ``finish_bundle``.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from typing import BinaryIO
from typing import Iterable
from typing import Optional

from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.runners.worker import sdk_worker

PAGE_BYTES = 1 << 20
MEMORY_BYTES = 64 << 20  # per bundle; pages beyond it go to the spill file


class GroupedValuesStore(sdk_worker.StateHandler):
    """A state handler serving ``runner`` state keys (group tokens); every
    other request goes to ``underlying``."""

    def __init__(
        self, underlying, memory_bytes: Optional[int] = None, page_bytes: int = PAGE_BYTES
    ):
        self._underlying = underlying
        self._memory_budget = MEMORY_BYTES if memory_bytes is None else memory_bytes
        self._page_bytes = page_bytes
        self._groups: dict[bytes, list] = {}
        self._in_memory = 0
        self._spill: Optional[BinaryIO] = None  # an open, already unlinked temporary file
        self._tokens = itertools.count()
        self.spilled_bytes = 0

    # -- the coder's IterableStateWriter ------------------------------------
    def write(self, values: Iterable, element_coder_impl) -> bytes:
        pages = []
        out = create_OutputStream()
        encode = element_coder_impl.encode_to_stream
        for value in values:
            encode(value, out, True)
            if out.size() >= self._page_bytes:
                pages.append(self._keep(out.get()))
                out = create_OutputStream()
        if out.size():
            pages.append(self._keep(out.get()))
        token = b'beam-group-%d' % next(self._tokens)
        self._groups[token] = pages
        return token

    def _keep(self, page: bytes):
        if self._in_memory + len(page) <= self._memory_budget:
            self._in_memory += len(page)
            return page
        if self._spill is None:
            # Private (0600) and unlinked at once: removed whatever happens.
            fd, path = tempfile.mkstemp(prefix='beam-spark-inproc-groups-')
            os.unlink(path)
            self._spill = os.fdopen(fd, 'w+b')
        offset = self._spill.seek(0, os.SEEK_END)
        self._spill.write(page)
        self.spilled_bytes += len(page)
        return offset, len(page)

    def _page(self, pages: list, index: int) -> bytes:
        page = pages[index]
        if isinstance(page, bytes):
            return page
        offset, length = page
        spill = self._spill
        assert spill is not None  # a page kept as (offset, length) was spilled
        spill.flush()
        return os.pread(spill.fileno(), length, offset)

    def reset(self) -> None:
        """Drops the bundle's groups (and the spill file)."""
        self._groups.clear()
        self._in_memory = 0
        self.spilled_bytes = 0
        if self._spill is not None:
            self._spill.close()
            self._spill = None

    # -- StateHandler --------------------------------------------------------
    def get_raw(self, state_key, continuation_token: Optional[bytes] = None):
        if state_key.WhichOneof('type') != 'runner':
            return self._underlying.get_raw(state_key, continuation_token)
        pages = self._groups[state_key.runner.key]
        index = int(continuation_token) if continuation_token else 0
        if not pages:
            return b'', None
        following = str(index + 1).encode() if index + 1 < len(pages) else None
        return self._page(pages, index), following

    def append_raw(self, state_key, data):
        return self._underlying.append_raw(state_key, data)

    def clear(self, state_key):
        return self._underlying.clear(state_key)

    def process_instruction_id(self, bundle_id):
        return self._underlying.process_instruction_id(bundle_id)

    def done(self):
        pass
