-- Blocking rules (policy.Rule.Block): the rule rejects every request it
-- applies to, counting nothing; its limit parameters stay for when the
-- block is lifted.
ALTER TABLE rules ADD COLUMN block boolean NOT NULL DEFAULT false;
