DELETE FROM api_keys WHERE kind = 'viewer';
ALTER TABLE api_keys DROP CONSTRAINT api_keys_kind_check;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_kind_check CHECK (kind IN ('admin', 'check'));
