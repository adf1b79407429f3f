-- A fixed window may be a calendar week, month or year (policy.Calendar),
-- UTC, in place of window_us (then 0).
ALTER TABLE rules ADD COLUMN calendar text NOT NULL DEFAULT '' CHECK (calendar IN ('', 'week', 'month', 'year'));
