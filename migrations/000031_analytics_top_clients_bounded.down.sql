-- Counts held at the bound stay there: what they were is not kept.
SELECT 1;
