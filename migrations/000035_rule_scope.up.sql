-- A rule's scope (policy.Rule.Scope): its limit holds in each region, or
-- once across every region of the deployment.
ALTER TABLE rules ADD COLUMN scope text NOT NULL DEFAULT 'region' CHECK (scope IN ('region', 'global'));
