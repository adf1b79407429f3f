-- Local counting: a rule counted on each decider and reconciled with the
-- shared counters every sync_us (0: strict, Redis decides every request).
ALTER TABLE rules ADD COLUMN sync_us bigint NOT NULL DEFAULT 0
    CHECK (sync_us = 0 OR sync_us BETWEEN 10000 AND 60000000);
