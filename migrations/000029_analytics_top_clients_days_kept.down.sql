-- Back to migration 27's rule, a day's sums are those of its hours kept:
-- the days whose hours were pruned are summed again from what is left.
LOCK TABLE analytics_top_clients IN SHARE ROW EXCLUSIVE MODE;

DELETE FROM analytics_top_clients_day d USING analytics_top_clients_days m WHERE d.day < m.hours_from;

INSERT INTO analytics_top_clients_day (tenant_id, rule_id, day, client_key, rejected, error)
SELECT t.tenant_id, t.rule_id, date_bin('1 day', t.hour, 'epoch'), t.client_key, sum(t.rejected), sum(t.error)
FROM analytics_top_clients t, analytics_top_clients_days m
WHERE t.hour < m.until AND date_bin('1 day', t.hour, 'epoch') < m.hours_from
GROUP BY 1, 2, 3, 4;

DROP TRIGGER analytics_top_clients_delete_to_day ON analytics_top_clients;
CREATE TRIGGER analytics_top_clients_delete_to_day AFTER DELETE ON analytics_top_clients
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION analytics_top_clients_to_day();

ALTER TABLE analytics_top_clients_days DROP COLUMN hours_from;
