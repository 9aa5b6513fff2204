"""Benchmark loaders: task YAMLs (``tasks/*.yaml``) plus row functions, mapped to :class:`Sample`.

Registered: VideoDetailCaption, the video detailed-description set, Video-MME, MovieChat-1K,
MVBench, LongVideoBench, SynthVid captions and SynthVid multiple choice. See
:mod:`vidspec.evaluation.benchmarks.registry` for usage.
"""

from vidspec.evaluation.benchmarks.registry import get_task, list_benchmarks, load_benchmark, render_prompt
from vidspec.evaluation.benchmarks.rows import ROW_FUNCTIONS, MappedRow
from vidspec.evaluation.benchmarks.types import METRICS, BenchmarkError, Metric, Sample, TaskSpec

__all__ = [
    "METRICS",
    "ROW_FUNCTIONS",
    "BenchmarkError",
    "MappedRow",
    "Metric",
    "Sample",
    "TaskSpec",
    "get_task",
    "list_benchmarks",
    "load_benchmark",
    "render_prompt",
]
