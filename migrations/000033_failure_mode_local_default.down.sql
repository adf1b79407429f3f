ALTER TABLE rules ALTER COLUMN failure_mode SET DEFAULT 'open';
