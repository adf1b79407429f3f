ALTER TABLE deciders DROP COLUMN health;
