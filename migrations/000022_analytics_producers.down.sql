DROP TABLE analytics_producers;
