"""Pure parts of the Kafka source: spreading the record limit, slicing ranges for Spark tasks."""

from __future__ import annotations

import pytest

from eobatch.sources.kafka import range_summary, spread
from eobatch.sources.kafka.read import slices


def test_spread_takes_everything_when_it_fits():
    assert spread(100, {0: 10, 1: 0, 2: 50}) == {0: 10, 1: 0, 2: 50}


@pytest.mark.parametrize("limit,backlog", [
    (100, {0: 1000, 1: 1000, 2: 1000}), (7, {0: 5, 1: 5}), (1, {0: 3, 1: 900}), (1000, {0: 999, 1: 2, 2: 0}),
])
def test_spread_never_exceeds_limit_or_backlog_and_uses_the_limit(limit, backlog):
    take = spread(limit, backlog)
    assert sum(take.values()) == min(limit, sum(backlog.values()))
    assert all(0 <= take[p] <= backlog[p] for p in backlog)


def test_spread_is_proportional():
    take = spread(300, {0: 1000, 1: 2000})
    assert take == {0: 100, 1: 200}


def test_slices_cover_each_range_exactly_once():
    parts = {"0": [0, 10], "1": [5, 5], "2": [100, 125]}
    pieces = slices(parts, 10)
    assert pieces == [(0, 0, 10), (2, 100, 110), (2, 110, 120), (2, 120, 125)]
    covered = sorted((p, o) for p, s, e in pieces for o in range(s, e))
    assert covered == sorted([(0, o) for o in range(10)] + [(2, o) for o in range(100, 125)])


def test_range_summary_shows_offsets_and_loss():
    s = range_summary({"topic": "t", "partitions": {"0": [0, 3], "1": [4, 4]}, "lost": {"1": [2, 4]}})
    assert s.startswith("t: 3 offsets p0[0,3)") and "LOST" in s


def test_offsets_are_asked_again_after_errors_a_restarting_broker_answers():
    """A broker that just restarted answers UNKNOWN_LEADER_EPOCH for a moment (seen in the suite
    right after a restart): plan asks again instead of failing; other errors fail at once."""
    from confluent_kafka import KafkaError, KafkaException

    from eobatch.sources.kafka.planner import _retriable

    for code in (KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError._TRANSPORT):
        assert _retriable(KafkaException(KafkaError(code)))
    assert not _retriable(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))
    assert not _retriable(KafkaException("no KafkaError inside"))
