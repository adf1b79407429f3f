DROP INDEX audit_log_at;
