-- Per-day sums of analytics_top_clients, so that a report of the top
-- clients over weeks reads a client's day where it would read 24 hours
-- (see internal/reports). Days start at midnight UTC.
--
-- The days before analytics_top_clients_days.until have their sums here:
-- the analytics consumer sums each day once it is over (Store.SumDays),
-- and a trigger keeps the sums of those days whoever writes their hours
-- (late events, pruning, a consumer of an earlier release during an
-- upgrade): a client evicted from an hour, or an hour pruned, leaves its
-- day too, and a day whose hours are all gone has no rows. So a report
-- answers the same from the days as from the hours. Writes to the days
-- not summed yet, nearly all of them, cost the trigger next to nothing.
CREATE TABLE analytics_top_clients_day (
    tenant_id  text NOT NULL,
    rule_id    text NOT NULL,
    day        timestamptz NOT NULL CHECK (extract(epoch FROM day) % 86400 = 0),
    client_key text NOT NULL,
    -- Sums of checked rows, not checked again: the row of a negative sum
    -- (an hour's row deleted) would fail a check before it met the row it
    -- adds to.
    rejected   bigint NOT NULL,
    error      bigint NOT NULL,
    PRIMARY KEY (tenant_id, rule_id, day, client_key)
);

CREATE TABLE analytics_top_clients_days (
    one   boolean PRIMARY KEY DEFAULT true CHECK (one),
    until timestamptz NOT NULL CHECK (extract(epoch FROM until) % 86400 = 0)
);

-- Adds what a statement's rows of the summed days gained (its new rows,
-- less its old rows) to their days' rows, in the order of their keys, and
-- deletes the rows left with nothing. It reads until under a shared
-- advisory lock that Store.SumDays takes exclusively to move it, so that
-- a day's hours written meanwhile count in its sums once: from SumDays if
-- they were committed before it summed, else from here.
CREATE FUNCTION analytics_top_clients_to_day() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    rows text := CASE TG_OP
        WHEN 'INSERT' THEN 'SELECT tenant_id, rule_id, hour, client_key, rejected, error FROM new_rows'
        WHEN 'DELETE' THEN 'SELECT tenant_id, rule_id, hour, client_key, -rejected, -error FROM old_rows'
        ELSE 'SELECT tenant_id, rule_id, hour, client_key, rejected, error FROM new_rows
            UNION ALL SELECT tenant_id, rule_id, hour, client_key, -rejected, -error FROM old_rows'
    END;
    summed timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1936483443, 0); -- "slds", analytics.daysLockClass
    SELECT until INTO summed FROM analytics_top_clients_days;
    EXECUTE format($f$
        INSERT INTO analytics_top_clients_day AS d (tenant_id, rule_id, day, client_key, rejected, error)
        SELECT tenant_id, rule_id, date_bin('1 day', hour, 'epoch'), client_key, sum(rejected), sum(error)
        FROM (%s) AS x (tenant_id, rule_id, hour, client_key, rejected, error)
        WHERE hour < $1
        GROUP BY 1, 2, 3, 4
        HAVING sum(rejected) <> 0 OR sum(error) <> 0
        ORDER BY 1, 2, 3, 4
        ON CONFLICT (tenant_id, rule_id, day, client_key) DO UPDATE SET
            rejected = d.rejected + excluded.rejected, error = d.error + excluded.error$f$, rows) USING summed;
    IF TG_OP <> 'INSERT' THEN
        DELETE FROM analytics_top_clients_day d
        USING (SELECT DISTINCT tenant_id, rule_id, date_bin('1 day', hour, 'epoch') AS day, client_key
            FROM old_rows WHERE hour < summed) o
        WHERE (d.tenant_id, d.rule_id, d.day, d.client_key) = (o.tenant_id, o.rule_id, o.day, o.client_key)
            AND d.rejected <= 0;
    END IF;
    RETURN NULL;
END
$$;

-- The days over: summed now, under a lock that keeps out the writes of
-- top clients until the triggers are in place.
LOCK TABLE analytics_top_clients IN SHARE ROW EXCLUSIVE MODE;

INSERT INTO analytics_top_clients_days (until) VALUES (date_bin('1 day', now(), 'epoch'));

INSERT INTO analytics_top_clients_day (tenant_id, rule_id, day, client_key, rejected, error)
SELECT tenant_id, rule_id, date_bin('1 day', hour, 'epoch'), client_key, sum(rejected), sum(error)
FROM analytics_top_clients
WHERE hour < date_bin('1 day', now(), 'epoch')
GROUP BY 1, 2, 3, 4;

-- A trigger with transition tables answers one event.
CREATE TRIGGER analytics_top_clients_insert_to_day AFTER INSERT ON analytics_top_clients
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION analytics_top_clients_to_day();
CREATE TRIGGER analytics_top_clients_update_to_day AFTER UPDATE ON analytics_top_clients
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION analytics_top_clients_to_day();
CREATE TRIGGER analytics_top_clients_delete_to_day AFTER DELETE ON analytics_top_clients
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION analytics_top_clients_to_day();
