-- Per-hour counts per (tenant, tier, rule): the sums of analytics_minute's
-- rows of each hour, so that reports over days and weeks read an hour's row
-- where they would read sixty (see internal/reports). Hours start on the
-- hour, UTC. A trigger keeps them, whoever writes the minutes (an analytics
-- consumer of an earlier release too, during an upgrade); deleting minutes
-- (pruning) leaves their hours, which are kept longer.
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

-- Adds what a minute's row gained to its hour's.
CREATE FUNCTION analytics_minute_to_hour() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        NEW.allowed := NEW.allowed - OLD.allowed;
        NEW.rejected := NEW.rejected - OLD.rejected;
        NEW.shadow_rejected := NEW.shadow_rejected - OLD.shadow_rejected;
        NEW.rejection_events := NEW.rejection_events - OLD.rejection_events;
        NEW.shadow_events := NEW.shadow_events - OLD.shadow_events;
        NEW.dropped_rejections := NEW.dropped_rejections - OLD.dropped_rejections;
    END IF;
    INSERT INTO analytics_hour AS h (tenant_id, hour, tier, rule_id, allowed, rejected, shadow_rejected,
        rejection_events, shadow_events, dropped_rejections)
    VALUES (NEW.tenant_id, date_bin('1 hour', NEW.minute, 'epoch'), NEW.tier, NEW.rule_id, NEW.allowed,
        NEW.rejected, NEW.shadow_rejected, NEW.rejection_events, NEW.shadow_events, NEW.dropped_rejections)
    ON CONFLICT (tenant_id, hour, tier, rule_id) DO UPDATE SET
        allowed = h.allowed + excluded.allowed, rejected = h.rejected + excluded.rejected,
        shadow_rejected = h.shadow_rejected + excluded.shadow_rejected,
        rejection_events = h.rejection_events + excluded.rejection_events,
        shadow_events = h.shadow_events + excluded.shadow_events,
        dropped_rejections = h.dropped_rejections + excluded.dropped_rejections;
    RETURN NULL;
END
$$;

-- No minute may be written between the sums below and the trigger.
LOCK TABLE analytics_minute IN SHARE ROW EXCLUSIVE MODE;

INSERT INTO analytics_hour (tenant_id, hour, tier, rule_id, allowed, rejected, shadow_rejected,
    rejection_events, shadow_events, dropped_rejections)
SELECT tenant_id, date_bin('1 hour', minute, 'epoch'), tier, rule_id, sum(allowed), sum(rejected),
    sum(shadow_rejected), sum(rejection_events), sum(shadow_events), sum(dropped_rejections)
FROM analytics_minute
GROUP BY 1, 2, 3, 4;

CREATE TRIGGER analytics_minute_to_hour AFTER INSERT OR UPDATE ON analytics_minute
    FOR EACH ROW EXECUTE FUNCTION analytics_minute_to_hour();
