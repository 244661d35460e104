"""process_* and python_info (export/process.py) against prometheus_client's ProcessCollector and
PlatformCollector: the same families, HELP, types, labels and values."""

from __future__ import annotations

import os
import sys

import pytest
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector

from specwatch.export import process

linux = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc")


def _theirs(collector_type):
    return list(collector_type(registry=CollectorRegistry()).collect())


def _shape(families):
    """Everything but the values."""
    return [(f.name, f.documentation, f.type, [(s.name, s.labels) for s in f.samples]) for f in families]


@linux
def test_process_families_are_prometheus_clients():
    ours, theirs = process.ProcessCollector().collect(), _theirs(ProcessCollector)
    assert _shape(ours) == _shape(theirs)
    values = {f.name: f.samples[0].value for f in ours}
    expected = {f.name: f.samples[0].value for f in theirs}
    for name in ("process_start_time_seconds", "process_max_fds"):  # fixed for the process's life
        assert values[name] == expected[name], name
    # Read a moment apart, ours first: CPU only grows (a clock tick may pass between the two reads),
    # memory and descriptors move a little.
    assert values["process_cpu_seconds"] <= expected["process_cpu_seconds"] <= values["process_cpu_seconds"] + 1
    for name in ("process_virtual_memory_bytes", "process_resident_memory_bytes", "process_open_fds"):
        assert values[name] == pytest.approx(expected[name], rel=0.2), name


def test_process_families_are_absent_without_proc(tmp_path):
    assert process.ProcessCollector(proc=str(tmp_path)).collect() == []
    assert ProcessCollector(proc=str(tmp_path), registry=CollectorRegistry()).collect() == []


def test_python_info_is_prometheus_clients():
    ours, theirs = process.PlatformCollector().collect(), _theirs(PlatformCollector)
    assert _shape(ours) == _shape(theirs)
    assert [s.value for f in ours for s in f.samples] == [s.value for f in theirs for s in f.samples] == [1]


def test_python_info_names_the_running_python():
    (sample,) = process.python_info().samples
    assert sample.labels["major"] == str(sys.version_info.major)
    assert sample.labels["minor"] == str(sys.version_info.minor)
    assert sample.value == 1
