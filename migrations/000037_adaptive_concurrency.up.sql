-- Adaptive concurrency rules (policy.AdaptiveConcurrency): the algorithm,
-- the least their limit falls to, how it is computed, and its partitions.
ALTER TABLE rules DROP CONSTRAINT rules_algorithm_check,
    ADD CONSTRAINT rules_algorithm_check CHECK (algorithm IN ('token_bucket', 'gcra', 'leaky_bucket', 'fixed_window',
        'sliding_log', 'sliding_window', 'sliding_buckets', 'concurrency', 'adaptive_concurrency'));
ALTER TABLE rules ADD COLUMN floor bigint NOT NULL DEFAULT 0 CHECK (floor >= 0),
    ADD COLUMN adaptation text NOT NULL DEFAULT 'gradient' CHECK (adaptation IN ('gradient', 'aimd')),
    ADD COLUMN partition_by text NOT NULL DEFAULT '',
    ADD COLUMN partitions jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(partitions) = 'array');
