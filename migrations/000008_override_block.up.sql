-- Blocking overrides (policy.Override.Block): a client's every request is
-- rejected (no tier, no rule), or with a rule_id that rule's requests (no
-- params). A block stands beside the client's tier move or parameters,
-- one of each at most.
ALTER TABLE overrides ADD COLUMN block boolean NOT NULL DEFAULT false;
ALTER TABLE overrides DROP CONSTRAINT overrides_check, DROP CONSTRAINT overrides_check1;
ALTER TABLE overrides ADD CONSTRAINT overrides_target CHECK (
    CASE WHEN block THEN tier_name IS NULL AND params IS NULL
    ELSE (tier_name IS NULL) <> (rule_id IS NULL) AND (rule_id IS NULL) = (params IS NULL) END);
DROP INDEX overrides_tier_move, overrides_rule_params;
CREATE UNIQUE INDEX overrides_tier_move ON overrides (tenant_id, descriptor_key, identifier) WHERE rule_id IS NULL AND NOT block;
CREATE UNIQUE INDEX overrides_rule_params ON overrides (tenant_id, descriptor_key, identifier, rule_id) WHERE rule_id IS NOT NULL AND NOT block;
CREATE UNIQUE INDEX overrides_block ON overrides (tenant_id, descriptor_key, identifier, coalesce(rule_id, '00000000-0000-0000-0000-000000000000')) WHERE block;
