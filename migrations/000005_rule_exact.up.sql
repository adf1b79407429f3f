-- Exact rules: envoyproxy/ratelimit's lookup (policy.Rule.Exact). A rule
-- applies only to requests with exactly its match keys, and of a tier's
-- exact rules the most specific wins.
ALTER TABLE rules ADD COLUMN exact boolean NOT NULL DEFAULT false;
