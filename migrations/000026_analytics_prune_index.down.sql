DROP INDEX analytics_hour_hour;
DROP INDEX analytics_minute_minute;
