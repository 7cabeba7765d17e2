"""The lab's slice of a real cluster (docs/design.md §15): a few blueprint nodes mapped onto the lab's
nodes, their production pods scaled to the lab's capacity with usage from real series, and batch
sampled from a real trace at a stated load factor over the lab's slack. Pure: inputs loaded by
the caller, numbers and frozen dataclasses out; :mod:`agents.lab.slice` renders them."""

from kalena_engine.labslice.batch import BatchGroup, BatchSample, sample_batch
from kalena_engine.labslice.production import (
    LabShape, ProductionSlice, SliceDaemonSet, SliceDeclaration, SlicePod, slice_production,
)
from kalena_engine.labslice.ir import slice_ir_documents
from kalena_engine.labslice.usage import (
    SliceUsage, by_template, lab_slack, replay_by_template, slice_usage, template_rows,
)

__all__ = [
    "BatchGroup", "BatchSample", "LabShape", "ProductionSlice", "SliceDaemonSet", "SliceDeclaration",
    "SlicePod", "SliceUsage", "by_template", "lab_slack", "replay_by_template", "sample_batch", "slice_ir_documents", "slice_production", "slice_usage", "template_rows",
]
