-- Calendar days, and the time zone whose midnights start a rule's calendar
-- windows (policy.Params.TimeZone, an IANA name; '' is UTC).
ALTER TABLE rules DROP CONSTRAINT rules_calendar_check;
ALTER TABLE rules ADD CONSTRAINT rules_calendar_check CHECK (calendar IN ('', 'day', 'week', 'month', 'year'));
ALTER TABLE rules ADD COLUMN time_zone text NOT NULL DEFAULT ''
    CONSTRAINT rules_time_zone_check CHECK (length(time_zone) <= 64 AND (time_zone = '' OR calendar <> ''));
