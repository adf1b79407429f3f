DROP INDEX audit_log_resource;
