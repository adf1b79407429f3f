CREATE INDEX api_keys_tenant ON api_keys (tenant_id);
DROP INDEX api_keys_page;
