"""Metrics from many bundles consolidate like their metric cells would."""

from __future__ import annotations

from apache_beam.metrics import monitoring_infos
from apache_beam.metrics.cells import BoundedTrieData
from apache_beam.metrics.cells import GaugeData
from apache_beam.metrics.cells import StringSetData
from apache_beam.metrics.execution import MetricKey
from apache_beam.metrics.metricbase import MetricName

from beam_spark_inproc.result import SparkPipelineResult


def _report(*infos):
    return {'stage': 's', 'monitoring_infos': [i.SerializeToString() for i in infos]}


def test_every_kind_merges_across_bundles():
    bundle_a = [
        monitoring_infos.int64_user_counter('ns', 'c', 2, ptransform='t'),
        monitoring_infos.int64_user_gauge('ns', 'g', GaugeData(5, timestamp=100), ptransform='t'),
        monitoring_infos.user_set_string('ns', 'ss', StringSetData({'a'}), ptransform='t'),
        monitoring_infos.user_bounded_trie(
            'ns', 'bt', BoundedTrieData(root=None, singleton=('x', 'y')), ptransform='t'
        ),
    ]
    bundle_b = [
        monitoring_infos.int64_user_counter('ns', 'c', 3, ptransform='t'),
        monitoring_infos.int64_user_gauge('ns', 'g', GaugeData(7, timestamp=50), ptransform='t'),
        monitoring_infos.user_set_string('ns', 'ss', StringSetData({'b', 'c'}), ptransform='t'),
        monitoring_infos.user_bounded_trie(
            'ns', 'bt', BoundedTrieData(root=None, singleton=('x', 'z')), ptransform='t'
        ),
    ]
    metrics = SparkPipelineResult('DONE', [_report(*bundle_a), _report(*bundle_b)]).metrics()
    result = metrics.query()

    def key(name):
        return MetricKey('t', MetricName('ns', name))

    [counter] = result['counters']
    assert counter.key == key('c') and counter.committed == 5
    [gauge] = result['gauges']
    assert gauge.committed.value == 5  # the later timestamp wins
    [string_set] = result['string_sets']
    assert string_set.committed == {'a', 'b', 'c'}
    [trie] = result['bounded_tries']
    assert trie.committed.get_result() == {('x', 'y', False), ('x', 'z', False)}
