"""What a Spark job costs on this machine when it moves almost nothing: the
floor under a pipeline's fixed time on Spark (run by hand, never by pytest).

On the runner's session (``InProcessSparkRunner().session``: local[2], the
runner's settings), 32 rows of Arrow data through identity ``mapInArrow``
steps, as the runner's jobs are made (``createDataFrame`` of Arrow, then
``mapInArrow``; ``repartition`` by a key column for a shuffle), collected with
``toArrow``:

- a 1-stage job: one ``mapInArrow``;
- a 3-stage job: ``mapInArrow``, shuffle, ``mapInArrow``, shuffle,
  ``mapInArrow`` (P1's first job has this shape: the source stage, the
  combine's shuffle, the post-combine stage, CombineGlobally's shuffle, its
  last stage).

Prints each repeat's seconds (building the DataFrame, running the job) and the
medians::

    python tests/benchmarks/spark_stage_cost.py --repeats 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def _identity(batches):
    yield from batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--repeats', type=int, default=7)
    args = parser.parse_args()

    import pyarrow as pa
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_spark_inproc import InProcessSparkRunner

    spark = InProcessSparkRunner().session(PipelineOptions([]))
    rows = pa.table({'k': pa.array(range(32), pa.int64()), 'v': pa.array([b'x'] * 32, pa.binary())})

    def one_stage():
        frame = spark.createDataFrame(rows)
        return frame.mapInArrow(_identity, frame.schema)

    def three_stages():
        frame = spark.createDataFrame(rows)
        schema = frame.schema
        return (
            frame.mapInArrow(_identity, schema)
            .repartition(2, 'k')
            .mapInArrow(_identity, schema)
            .repartition(2, 'k')
            .mapInArrow(_identity, schema)
        )

    times: dict[str, list[float]] = {'1 stage': [], '3 stages': []}
    for repeat in range(args.repeats + 1):  # the first is a warm-up
        for name, build in (('1 stage', one_stage), ('3 stages', three_stages)):
            start = time.perf_counter()
            frame = build()
            built = time.perf_counter()
            assert frame.toArrow().num_rows == 32
            done = time.perf_counter()
            print(
                f'{name}: build {built - start:.3f} s, job {done - built:.3f} s'
                f'{" (warm-up)" if repeat == 0 else ""}; load {os.getloadavg()[0]:.1f}'
            )
            if repeat:
                times[name].append(done - start)
    for name, seconds in times.items():
        print(
            f'{name}: median {statistics.median(seconds):.3f} s '
            f'({min(seconds):.3f}-{max(seconds):.3f}) over {len(seconds)} repeats'
        )


if __name__ == '__main__':
    main()
