-- A random stamp drawn with each config version of a tenant (see
-- pgstore.Store.bump): a decider holding the database's version with
-- another stamp holds a configuration the database lost (restored from a
-- backup, failed over to a replica behind) and is sent the database's.
-- Existing tenants get one each: deciders that hold them know no stamp,
-- which matches any.
ALTER TABLE tenants ADD COLUMN config_stamp bigint NOT NULL
  DEFAULT (1 + floor(random() * 9.2e18))::bigint CHECK (config_stamp <> 0);
