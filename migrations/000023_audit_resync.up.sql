-- A tenant's config version raised past what a decider holds, after the
-- database went back to an earlier state (pgstore.Store.RaiseVersions), is
-- an audit action of its own.
ALTER TABLE audit_log DROP CONSTRAINT audit_log_action_check;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_action_check CHECK (action IN ('create', 'update', 'delete', 'reorder', 'revoke', 'rotate', 'resync'));
