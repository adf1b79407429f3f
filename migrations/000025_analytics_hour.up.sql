-- Per-hour counts per (tenant, tier, rule): the sums of analytics_minute's
-- rows of each hour, written by cmd/analytics in the same statement as the
-- minutes they sum, so that reports over days and weeks read an hour's row
-- where they would read sixty (see internal/reports). Hours start on the
-- hour, UTC.
CREATE TABLE analytics_hour (
    tenant_id          text NOT NULL,
    hour               timestamptz NOT NULL CHECK (extract(epoch FROM hour) % 3600 = 0),
    tier               text NOT NULL,
    rule_id            text NOT NULL,
    allowed            bigint NOT NULL DEFAULT 0 CHECK (allowed >= 0),
    rejected           bigint NOT NULL DEFAULT 0 CHECK (rejected >= 0),
    shadow_rejected    bigint NOT NULL DEFAULT 0 CHECK (shadow_rejected >= 0),
    rejection_events   bigint NOT NULL DEFAULT 0 CHECK (rejection_events >= 0),
    shadow_events      bigint NOT NULL DEFAULT 0 CHECK (shadow_events >= 0),
    dropped_rejections bigint NOT NULL DEFAULT 0 CHECK (dropped_rejections >= 0),
    PRIMARY KEY (tenant_id, hour, tier, rule_id)
);

-- The hours of the minutes already rolled up.
INSERT INTO analytics_hour (tenant_id, hour, tier, rule_id, allowed, rejected, shadow_rejected,
    rejection_events, shadow_events, dropped_rejections)
SELECT tenant_id, date_bin('1 hour', minute, 'epoch'), tier, rule_id, sum(allowed), sum(rejected),
    sum(shadow_rejected), sum(rejection_events), sum(shadow_events), sum(dropped_rejections)
FROM analytics_minute
GROUP BY 1, 2, 3, 4;
