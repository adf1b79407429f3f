DELETE FROM overrides WHERE block;
DROP INDEX overrides_block, overrides_tier_move, overrides_rule_params;
CREATE UNIQUE INDEX overrides_tier_move ON overrides (tenant_id, descriptor_key, identifier) WHERE rule_id IS NULL;
CREATE UNIQUE INDEX overrides_rule_params ON overrides (tenant_id, descriptor_key, identifier, rule_id) WHERE rule_id IS NOT NULL;
ALTER TABLE overrides DROP CONSTRAINT overrides_target;
ALTER TABLE overrides ADD CONSTRAINT overrides_check CHECK ((tier_name IS NULL) <> (rule_id IS NULL)),
    ADD CONSTRAINT overrides_check1 CHECK ((rule_id IS NULL) = (params IS NULL));
ALTER TABLE overrides DROP COLUMN block;
