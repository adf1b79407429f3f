ALTER TABLE api_keys DROP COLUMN expires_at;
