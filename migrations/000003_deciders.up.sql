-- Deciders as they last synced: the operator's view of which config
-- version of each tenant each decider enforces.
CREATE TABLE deciders (
    name           text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 200),
    last_synced_at timestamptz NOT NULL DEFAULT now(),
    versions       jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(versions) = 'object')
);
CREATE INDEX deciders_last_synced_at ON deciders (last_synced_at);
