-- Rules replacing others (policy.Rule.Replaces, envoyproxy/ratelimit's
-- replaces): names of the rules this one replaces when it applies.
ALTER TABLE rules ADD COLUMN replaces text[] NOT NULL DEFAULT '{}' CHECK (cardinality(replaces) <= 16);
