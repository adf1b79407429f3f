DROP TABLE config_versions;
DROP TABLE audit_log;
DROP TABLE api_keys;
DROP TABLE overrides;
DROP TABLE rules;
DROP TABLE tiers;
DROP TABLE tenants;
