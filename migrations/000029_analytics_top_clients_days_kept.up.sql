-- The top clients' days outlive their hours: analytics prunes the hours
-- with the minutes (SLUICE_RETENTION, 30 days) and the days with the
-- hourly rollups (SLUICE_HOUR_RETENTION, 400 days), so that a report of
-- the top clients over a quarter or a year has them (internal/reports
-- reads whole days where the hours are gone).
--
-- hours_from is where the hours kept begin: analytics prunes only hours
-- of days summed, and those before it have their sums in the days alone.
ALTER TABLE analytics_top_clients_days ADD COLUMN hours_from timestamptz NOT NULL DEFAULT '-infinity';

-- Migration 27's trigger on deletes, but not for analytics' pruning
-- (Store.Prune), which says so by setting sluice.keep_days in its
-- transaction: those days keep their sums. Any other delete (a client
-- evicted from an hour) still leaves its day.
DROP TRIGGER analytics_top_clients_delete_to_day ON analytics_top_clients;
CREATE TRIGGER analytics_top_clients_delete_to_day AFTER DELETE ON analytics_top_clients
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT WHEN (current_setting('sluice.keep_days', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION analytics_top_clients_to_day();
