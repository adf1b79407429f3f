-- A tenant in shadow (policy.Tenant.Shadow): every rule of it is evaluated
-- and reported, none rejects — a tenant's first rollout.
ALTER TABLE tenants ADD COLUMN shadow boolean NOT NULL DEFAULT false;
