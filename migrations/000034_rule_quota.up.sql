-- Quota rules: envoyproxy/ratelimit's quota_mode (policy.Rule.Quota). On
-- Envoy's rate limit service a call is rejected only when every quota
-- descriptor of it is over its limit.
ALTER TABLE rules ADD COLUMN quota boolean NOT NULL DEFAULT false;
