DROP INDEX overrides_expires_at;
