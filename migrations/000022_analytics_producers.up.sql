-- The highest event sequence number committed per consumer group, partition
-- and producer (one run of a decider's publisher), in the same transaction
-- as the rollups and the offset: analytics skips an event whose (producer,
-- seq) is not above it, so what a decider resent after a write that timed
-- out, but that Kafka had taken, counts once. Rows of producers not seen
-- within the rollups' retention are pruned with them.
CREATE TABLE analytics_producers (
    group_id  text NOT NULL,
    topic     text NOT NULL,
    partition integer NOT NULL CHECK (partition >= 0),
    producer  text NOT NULL CHECK (producer <> ''),
    last_seq  bigint NOT NULL CHECK (last_seq > 0),
    seen_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, topic, partition, producer)
);
CREATE INDEX analytics_producers_seen_at ON analytics_producers (seen_at);
