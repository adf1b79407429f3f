-- New rules fail to the in-process engine (local) unless they say otherwise.
-- Rules already stored keep the failure mode they have.
ALTER TABLE rules ALTER COLUMN failure_mode SET DEFAULT 'local';
