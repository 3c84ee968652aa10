"""Which DLQ records a replay takes: filters, already replayed records, records that cannot be replayed."""

from __future__ import annotations

from airflow_conduit.pipeline.model import DestinationSpec, PipelineSpec, ProcessorSpec, SourceSpec
from airflow_conduit.spark.replay import ReplayFilter, identity, select

SPEC = PipelineSpec(
    id="p",
    sources=(SourceSpec("in", "file", {"path": "/in", "format": "json"}), SourceSpec("csv-in", "file", {"path": "/c", "format": "csv"})),
    destinations=(DestinationSpec("lake", "file", {"path": "/out"}),),
)


def _row(position: int, **kw):
    row = {"batch_id": 3, "source_id": "in", "source_file": "file:/in/a.json", "source_split_start": 0,
           "source_position": position, "stage": "source", "component_id": "in", "exception_class": "X",
           "exception_message": "m", "time_of_error": "2026-01-01T00:00:00.000000Z", "record": "{}"}
    row.update(kw)
    return row


def test_filters_select_by_stage_component_class_rule_batch_and_time():
    rule = _row(1, stage="processor", component_id="quality", exception_message="expectation 'positive' (drop) failed: a > 0")
    late = _row(2, time_of_error="2026-02-01T00:00:00.000000Z", batch_id=7)
    plain = _row(3)
    rows = [rule, late, plain]
    pick = lambda f: [r["source_position"] for r in select(rows, SPEC, set(), f)[0]]  # noqa: E731
    assert pick(ReplayFilter()) == [1, 2, 3]
    assert pick(ReplayFilter(stages=("processor",))) == [1]
    assert pick(ReplayFilter(components=("in",))) == [2, 3]
    assert pick(ReplayFilter(rules=("positive",))) == [1]
    assert pick(ReplayFilter(rules=("positiv",))) == []  # a rule name, not a prefix
    assert pick(ReplayFilter(batch_min=5)) == [2]
    assert pick(ReplayFilter(batch_max=5)) == [1, 3]
    assert pick(ReplayFilter(since="2026-01-15T00:00:00Z")) == [2]
    assert pick(ReplayFilter(until="2026-01-15T00:00:00Z")) == [1, 3]
    assert pick(ReplayFilter(exception_classes=("Y",))) == []


def test_replayed_records_and_unreplayable_ones_are_not_taken_and_are_counted_by_reason():
    taken = _row(1)
    rows = [taken, _row(2, record=None), _row(3, source_id="gone"), _row(4, source_id="csv-in", record="4,x,1.0"),
            _row(5, source_id="csv-in", stage="processor", record="5,y,2.0"), _row(6),
            _row(7, exception_class="airflow_conduit.spark.InvalidUtf8Error")]
    chosen, skipped = select(rows, SPEC, {identity(taken)}, ReplayFilter())
    assert [r["source_position"] for r in chosen] == [4, 5, 6]  # CSV lines are parsed as CSV again
    assert skipped == {"already replayed": 1, "no payload (include-messages was false)": 1,
                       "its source is no longer in the spec": 1,
                       "a line that is not UTF-8 (its payload is its bytes, base64-encoded)": 1}


def test_a_record_is_taken_again_only_when_its_sources_spec_changed_since_it_failed_or_when_forced():
    import dataclasses

    from airflow_conduit.pipeline.fingerprint import spec_fingerprints
    from airflow_conduit.spark.replay import UNCHANGED

    before = spec_fingerprints(SPEC)
    rows = [_row(1), _row(2, source_id="csv-in")]
    failed_under = lambda row: before[row["source_id"]]  # noqa: E731 - both failed under SPEC
    chosen, skipped = select(rows, SPEC, set(), ReplayFilter(), failed_under)
    assert chosen == [] and skipped == {UNCHANGED: 2}
    assert len(select(rows, SPEC, set(), ReplayFilter(), failed_under, force=True)[0]) == 2
    assert len(select(rows, SPEC, set(), ReplayFilter(), lambda row: None)[0]) == 2  # unknown: taken

    fixed_json = dataclasses.replace(SPEC, sources=(
        SourceSpec("in", "file", {"path": "/in", "format": "json", "schema": "id BIGINT"}), SPEC.sources[1]))
    chosen, skipped = select(rows, fixed_json, set(), ReplayFilter(), failed_under)
    assert [r["source_id"] for r in chosen] == ["in"] and skipped == {UNCHANGED: 1}
    moved = dataclasses.replace(SPEC, sources=(SourceSpec("in", "file", {"path": "/elsewhere", "format": "json"}), SPEC.sources[1]))
    assert select(rows, moved, set(), ReplayFilter(), failed_under)[0] == []  # where the files are decides no fate
    with_rule = dataclasses.replace(SPEC, processors=(ProcessorSpec("q", "expect", {"rules": []}),))
    assert len(select(rows, with_rule, set(), ReplayFilter(), failed_under)[0]) == 2  # pipeline processors: every source
