DROP TABLE analytics_hour;
