ALTER TABLE analytics_top_clients RESET (fillfactor);
ALTER TABLE analytics_minute RESET (fillfactor);
ALTER TABLE analytics_hour RESET (fillfactor);
