-- Viewer keys: a tenant's configuration and reports, read only
-- (policy.KeyViewer).
ALTER TABLE api_keys DROP CONSTRAINT api_keys_kind_check;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_kind_check CHECK (kind IN ('admin', 'check', 'viewer'));
