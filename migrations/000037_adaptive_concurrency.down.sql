DELETE FROM rules WHERE algorithm = 'adaptive_concurrency';
ALTER TABLE rules DROP COLUMN floor, DROP COLUMN adaptation, DROP COLUMN partition_by, DROP COLUMN partitions;
ALTER TABLE rules DROP CONSTRAINT rules_algorithm_check,
    ADD CONSTRAINT rules_algorithm_check CHECK (algorithm IN ('token_bucket', 'gcra', 'leaky_bucket', 'fixed_window',
        'sliding_log', 'sliding_window', 'sliding_buckets', 'concurrency'));
