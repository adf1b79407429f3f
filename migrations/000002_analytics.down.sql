DROP TABLE analytics_offsets;
DROP TABLE analytics_top_clients;
DROP TABLE analytics_minute;
