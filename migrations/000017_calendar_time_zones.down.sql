-- A calendar day in UTC is the epoch-aligned window of 24 hours; zoned
-- calendar windows fall back to UTC.
ALTER TABLE rules DROP COLUMN time_zone;
UPDATE rules SET calendar = '', window_us = 86400000000 WHERE calendar = 'day';
ALTER TABLE rules DROP CONSTRAINT rules_calendar_check;
ALTER TABLE rules ADD CONSTRAINT rules_calendar_check CHECK (calendar IN ('', 'week', 'month', 'year'));
