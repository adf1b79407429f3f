-- A resource's history (ListAudit with a resource_id), newest first.
CREATE INDEX audit_log_resource ON audit_log (tenant_id, resource_id, id DESC);
