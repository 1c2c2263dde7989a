"""One MonitoringInfo per metric, stage and label set, whatever the bundle count.

Beam's ``monitoring_infos.consolidate`` sums counters and merges distributions;
gauges, string sets and bounded tries would come out once per bundle, and the
last bundle's value would win. ``consolidate`` merges those as their metric
cells do. Used by ``live.LiveMetrics`` as reports arrive, by the pipeline result
and by the streaming loop's commit record.
"""

from __future__ import annotations

from apache_beam.coders import IterableCoder
from apache_beam.coders import StrUtf8Coder
from apache_beam.metrics import monitoring_infos
from apache_beam.portability.api import metrics_pb2


def _merge_latest(a, b):
    ts_a, _ = monitoring_infos.extract_gauge_value(a)
    ts_b, _ = monitoring_infos.extract_gauge_value(b)
    return b if ts_b >= ts_a else a


def _merge_string_sets(a, b):
    union = monitoring_infos.extract_string_set_value(
        a
    ) | monitoring_infos.extract_string_set_value(b)
    merged = metrics_pb2.MonitoringInfo()
    merged.CopyFrom(a)
    merged.payload = IterableCoder(StrUtf8Coder()).encode(sorted(union))
    return merged


def _merge_bounded_tries(a, b):
    trie = monitoring_infos.extract_bounded_trie_value(a).combine(
        monitoring_infos.extract_bounded_trie_value(b)
    )
    merged = metrics_pb2.MonitoringInfo()
    merged.CopyFrom(a)
    merged.payload = trie.to_proto().SerializeToString()
    return merged


# Beam's ``monitoring_infos.consolidate`` sums counters and merges
# distributions; the other kinds would come out once per bundle, and the last
# bundle's value would win. These merge them as their metric cells do.
_MERGERS = {
    monitoring_infos.LATEST_INT64_TYPE: _merge_latest,
    monitoring_infos.STRING_SET_TYPE: _merge_string_sets,
    monitoring_infos.BOUNDED_TRIE_TYPE: _merge_bounded_tries,
}


def consolidate(infos: list) -> list:
    """One MonitoringInfo per metric and label set, whatever the bundle count."""
    merged: dict = {}
    rest = []
    for info in infos:
        merge = _MERGERS.get(info.type)
        if merge is None:
            rest.append(info)
            continue
        key = monitoring_infos.to_key(info)
        merged[key] = merge(merged[key], info) if key in merged else info
    return list(monitoring_infos.consolidate(rest)) + list(merged.values())
