UPDATE audit_log SET action = 'update' WHERE action = 'resync';
ALTER TABLE audit_log DROP CONSTRAINT audit_log_action_check;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_action_check CHECK (action IN ('create', 'update', 'delete', 'reorder', 'revoke', 'rotate'));
