-- A key may expire (policy.APIKey.ExpiresAt): refused from then on, by the
-- control plane and by every decider, without a new config version.
ALTER TABLE api_keys ADD COLUMN expires_at timestamptz;
