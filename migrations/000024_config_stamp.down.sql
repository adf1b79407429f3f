ALTER TABLE tenants DROP COLUMN config_stamp;
