-- Pages of a tenant's keys (ListKeys), oldest first, from the index.
CREATE INDEX api_keys_page ON api_keys (tenant_id, created_at, id);
DROP INDEX api_keys_tenant;
