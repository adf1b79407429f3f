ALTER TABLE rules DROP COLUMN replaces;
