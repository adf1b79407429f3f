-- Pages of a tenant's overrides (ListOverrides: up to 100,000 of them) in
-- the byte order of their identifiers, and identifier prefixes found with
-- LIKE 'p%', from the index alone whatever the database's collation.
CREATE INDEX overrides_page ON overrides (tenant_id, (identifier COLLATE "C"), id);
