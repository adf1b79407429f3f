-- The audit log's retention (controlplane -audit-retention) deletes the
-- oldest rows first.
CREATE INDEX audit_log_at ON audit_log (at);
