-- Overrides that expired longer ago than the control plane's
-- -override-retention are deleted (pgstore.Store.PruneOverrides): a tenant
-- that blocks clients for an hour at a time would otherwise keep every
-- block it ever made. The index finds them without reading the table.
CREATE INDEX overrides_expires_at ON overrides (expires_at) WHERE expires_at IS NOT NULL;
