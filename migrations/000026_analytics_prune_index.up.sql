-- Pruning deletes the rollups older than the retention (see
-- analytics.Store.Prune): without an index led by the time it read every
-- row of the table each hour (30 days of a busy tenant are 650,000 minute
-- rows a tenant). Rows are written in about the order of their time, so a
-- BRIN index answers "older than" from a summary a few pages long, and
-- costs ingest next to nothing.
CREATE INDEX analytics_minute_minute ON analytics_minute USING brin (minute) WITH (autosummarize = on);
CREATE INDEX analytics_hour_hour ON analytics_hour USING brin (hour) WITH (autosummarize = on);
