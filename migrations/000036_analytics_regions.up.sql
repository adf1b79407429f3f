-- Rollups per region: events carry their decider's -region, and each row
-- of minutes and hours is one region's ('' where deciders name none).
-- Reports sum a tenant's regions.
ALTER TABLE analytics_minute ADD COLUMN region text NOT NULL DEFAULT '';
ALTER TABLE analytics_minute DROP CONSTRAINT analytics_minute_pkey, ADD PRIMARY KEY (tenant_id, minute, tier, rule_id, region);
ALTER TABLE analytics_hour ADD COLUMN region text NOT NULL DEFAULT '';
ALTER TABLE analytics_hour DROP CONSTRAINT analytics_hour_pkey, ADD PRIMARY KEY (tenant_id, hour, tier, rule_id, region);

-- Adds what a minute's row gained to its hour's, of the same region.
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
    INSERT INTO analytics_hour AS h (tenant_id, hour, tier, rule_id, region, allowed, rejected, shadow_rejected,
        rejection_events, shadow_events, dropped_rejections)
    VALUES (NEW.tenant_id, date_bin('1 hour', NEW.minute, 'epoch'), NEW.tier, NEW.rule_id, NEW.region, NEW.allowed,
        NEW.rejected, NEW.shadow_rejected, NEW.rejection_events, NEW.shadow_events, NEW.dropped_rejections)
    ON CONFLICT (tenant_id, hour, tier, rule_id, region) DO UPDATE SET
        allowed = h.allowed + excluded.allowed, rejected = h.rejected + excluded.rejected,
        shadow_rejected = h.shadow_rejected + excluded.shadow_rejected,
        rejection_events = h.rejection_events + excluded.rejection_events,
        shadow_events = h.shadow_events + excluded.shadow_events,
        dropped_rejections = h.dropped_rejections + excluded.dropped_rejections;
    RETURN NULL;
END
$$;
