-- Back to one row per (tenant, minute or hour, tier, rule): each row's
-- regions summed, with the trigger off while the minutes are rewritten.
CREATE OR REPLACE FUNCTION analytics_minute_to_hour() RETURNS trigger LANGUAGE plpgsql AS $$
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

ALTER TABLE analytics_minute DISABLE TRIGGER analytics_minute_to_hour;
CREATE TEMP TABLE summed_minutes ON COMMIT DROP AS
SELECT tenant_id, minute, tier, rule_id, sum(allowed) AS allowed, sum(rejected) AS rejected,
    sum(shadow_rejected) AS shadow_rejected, sum(rejection_events) AS rejection_events,
    sum(shadow_events) AS shadow_events, sum(dropped_rejections) AS dropped_rejections
FROM analytics_minute GROUP BY 1, 2, 3, 4;
DELETE FROM analytics_minute;
ALTER TABLE analytics_minute DROP COLUMN region;
ALTER TABLE analytics_minute ADD PRIMARY KEY (tenant_id, minute, tier, rule_id);
INSERT INTO analytics_minute (tenant_id, minute, tier, rule_id, allowed, rejected, shadow_rejected,
    rejection_events, shadow_events, dropped_rejections)
SELECT * FROM summed_minutes;
ALTER TABLE analytics_minute ENABLE TRIGGER analytics_minute_to_hour;

CREATE TEMP TABLE summed_hours ON COMMIT DROP AS
SELECT tenant_id, hour, tier, rule_id, sum(allowed) AS allowed, sum(rejected) AS rejected,
    sum(shadow_rejected) AS shadow_rejected, sum(rejection_events) AS rejection_events,
    sum(shadow_events) AS shadow_events, sum(dropped_rejections) AS dropped_rejections
FROM analytics_hour GROUP BY 1, 2, 3, 4;
DELETE FROM analytics_hour;
ALTER TABLE analytics_hour DROP COLUMN region;
ALTER TABLE analytics_hour ADD PRIMARY KEY (tenant_id, hour, tier, rule_id);
INSERT INTO analytics_hour (tenant_id, hour, tier, rule_id, allowed, rejected, shadow_rejected,
    rejection_events, shadow_events, dropped_rejections)
SELECT * FROM summed_hours;
