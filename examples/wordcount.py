"""Word count on local Spark with InProcessSparkRunner.

    python examples/wordcount.py                      # bundled sonnets, top 10 printed
    python examples/wordcount.py --input 'logs/*.txt' --output counts
    python examples/wordcount.py --runner=beam_spark_inproc.InProcessSparkRunner \
        --spark_master 'local[2]'

Without ``--runner`` the pipeline runs on InProcessSparkRunner; any Beam runner
can be passed instead, with no change to the code.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions

DEFAULT_INPUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data', 'sonnets.txt')


def count_words(lines: beam.PCollection) -> beam.PCollection:
    return (
        lines
        | 'Split' >> beam.FlatMap(lambda line: re.findall(r"[\w']+", line.lower()))
        | 'Count' >> beam.combiners.Count.PerElement()
    )


def run(argv: list[str] | None = None) -> list[tuple[str, int]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        '--input', default=DEFAULT_INPUT, help='Text file(s) to read (a glob is fine).'
    )
    parser.add_argument(
        '--output', default=None, help='Prefix of text files to write "word: count" to.'
    )
    parser.add_argument(
        '--top', type=int, default=10, help='How many of the most frequent words to print.'
    )
    args, beam_args = parser.parse_known_args(argv)
    options = PipelineOptions(beam_args)
    if not options.view_as(StandardOptions).runner:
        options.view_as(StandardOptions).runner = 'beam_spark_inproc.InProcessSparkRunner'

    with tempfile.TemporaryDirectory() as tmp:
        top_path = os.path.join(tmp, 'top')
        with beam.Pipeline(options=options) as p:
            counts = count_words(p | 'Read' >> beam.io.ReadFromText(args.input))
            if args.output:
                (
                    counts
                    | 'Format' >> beam.MapTuple(lambda word, n: f'{word}: {n}')
                    | 'Write' >> beam.io.WriteToText(args.output)
                )
            (
                counts
                | 'Top' >> beam.combiners.Top.Of(args.top, key=lambda kv: (kv[1], kv[0]))
                | 'Json' >> beam.Map(json.dumps)
                | 'WriteTop' >> beam.io.WriteToText(top_path, shard_name_template='')
            )
        # The DoFns ran in Spark's Python workers: read their output here.
        with open(top_path) as f:
            top = [tuple(kv) for kv in json.loads(f.read())]
    for word, n in top:
        print(f'{word}: {n}')
    return top


if __name__ == '__main__':
    run(sys.argv[1:])
