ALTER TABLE rules DROP COLUMN calendar;
