-- Analytics: rollups of decision events, written by cmd/analytics and read
-- by the control plane's reports API. Tenant and rule ids are kept as text
-- without foreign keys: a rollup outlives the rule or tenant it counts.

-- Per-minute counts per (tenant, tier, rule). allowed, rejected and
-- shadow_rejected come from deciders' counter deltas (exact even when
-- rejection events were dropped); rejection_events and shadow_events count
-- the rejection events received. dropped_rejections, on rows with an empty
-- tier and rule, is the gap deciders reported in the rejection stream.
CREATE TABLE analytics_minute (
    tenant_id          text NOT NULL,
    minute             timestamptz NOT NULL CHECK (extract(epoch FROM minute) % 60 = 0),
    tier               text NOT NULL,
    rule_id            text NOT NULL,
    allowed            bigint NOT NULL DEFAULT 0 CHECK (allowed >= 0),
    rejected           bigint NOT NULL DEFAULT 0 CHECK (rejected >= 0),
    shadow_rejected    bigint NOT NULL DEFAULT 0 CHECK (shadow_rejected >= 0),
    rejection_events   bigint NOT NULL DEFAULT 0 CHECK (rejection_events >= 0),
    shadow_events      bigint NOT NULL DEFAULT 0 CHECK (shadow_events >= 0),
    dropped_rejections bigint NOT NULL DEFAULT 0 CHECK (dropped_rejections >= 0),
    PRIMARY KEY (tenant_id, minute, tier, rule_id)
);

-- The most rejected clients per (tenant, rule, hour), kept by the
-- space-saving algorithm: at most the consumer's capacity rows per group;
-- rejected over-counts a client's rejections by at most error.
CREATE TABLE analytics_top_clients (
    tenant_id  text NOT NULL,
    rule_id    text NOT NULL,
    hour       timestamptz NOT NULL CHECK (extract(epoch FROM hour) % 3600 = 0),
    client_key text NOT NULL,
    rejected   bigint NOT NULL CHECK (rejected > 0),
    error      bigint NOT NULL DEFAULT 0 CHECK (error >= 0 AND error < rejected),
    PRIMARY KEY (tenant_id, rule_id, hour, client_key)
);
CREATE INDEX analytics_top_clients_hour ON analytics_top_clients (hour);

-- The next offset to read per consumer group and partition, committed in
-- the same transaction as the rollups it covers.
CREATE TABLE analytics_offsets (
    group_id    text NOT NULL,
    topic       text NOT NULL,
    partition   integer NOT NULL CHECK (partition >= 0),
    next_offset bigint NOT NULL CHECK (next_offset >= 0),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, topic, partition)
);
