ALTER TABLE tenants DROP COLUMN shadow;
