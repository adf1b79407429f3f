DROP TRIGGER analytics_minute_to_hour ON analytics_minute;
DROP FUNCTION analytics_minute_to_hour();
DROP TABLE analytics_hour;
