-- The rollups of the current minute and hour, and the current hour's top
-- clients, are rewritten by every batch the analytics consumer commits
-- (ten a second at 100,000 events/s). Pages filled to 80% keep room for
-- the new versions beside the old, so that PostgreSQL updates a row in its
-- page without a new entry in each index (a HOT update), and prunes the
-- old versions in place: BenchmarkIngest 96,000 -> 125,000-134,000
-- events/s, the rollups' tables a fifth larger, reports level. Pages
-- written before keep their fill.
ALTER TABLE analytics_top_clients SET (fillfactor = 80);
ALTER TABLE analytics_minute SET (fillfactor = 80);
ALTER TABLE analytics_hour SET (fillfactor = 80);
