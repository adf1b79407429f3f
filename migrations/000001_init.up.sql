-- The control plane's schema. Limits mirror internal/policy's bounds so that
-- a bug above the database cannot store what validation would refuse.

CREATE TABLE tenants (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    slug           text NOT NULL UNIQUE CHECK (slug ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    name           text NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    status         text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'suspended')),
    default_tier   text NOT NULL DEFAULT 'default' CHECK (default_tier ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    -- Bumped in the same transaction as every change of the tenant's config.
    config_version bigint NOT NULL DEFAULT 1 CHECK (config_version > 0),
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE tiers (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id  uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name       text NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name),
    UNIQUE (tenant_id, id) -- target of rules' composite key
);

CREATE TABLE rules (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id      uuid NOT NULL,
    tier_id        uuid NOT NULL,
    name           text NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    position       integer NOT NULL CHECK (position >= 0),
    match          jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(match) = 'array'),
    key_by         text[] NOT NULL DEFAULT '{}' CHECK (cardinality(key_by) <= 8),
    algorithm      text NOT NULL CHECK (algorithm IN ('token_bucket', 'gcra', 'leaky_bucket', 'fixed_window',
                                                     'sliding_log', 'sliding_window', 'sliding_buckets', 'concurrency')),
    lim            bigint NOT NULL CHECK (lim BETWEEN 1 AND 1000000000),
    window_us      bigint NOT NULL DEFAULT 0 CHECK (window_us BETWEEN 0 AND 31622400000000),
    burst          bigint NOT NULL DEFAULT 0 CHECK (burst BETWEEN 0 AND 1000000000),
    warm_up_us     bigint NOT NULL DEFAULT 0 CHECK (warm_up_us >= 0),
    cold_factor    double precision NOT NULL DEFAULT 0 CHECK (cold_factor = 0 OR cold_factor > 1),
    max_delay_us   bigint NOT NULL DEFAULT 0 CHECK (max_delay_us >= 0),
    granularity_us bigint NOT NULL DEFAULT 0 CHECK (granularity_us >= 0),
    lease_ttl_us   bigint NOT NULL DEFAULT 0 CHECK (lease_ttl_us >= 0),
    shadow         boolean NOT NULL DEFAULT false,
    failure_mode   text NOT NULL DEFAULT 'open' CHECK (failure_mode IN ('open', 'closed', 'local')),
    enabled        boolean NOT NULL DEFAULT true,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    -- A rule belongs to a tier of its own tenant; deleting the tier deletes its rules.
    FOREIGN KEY (tenant_id, tier_id) REFERENCES tiers (tenant_id, id) ON DELETE CASCADE,
    UNIQUE (tier_id, name),
    UNIQUE (tier_id, position) DEFERRABLE INITIALLY DEFERRED -- reordering swaps positions in one transaction
);

CREATE TABLE overrides (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id      uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    descriptor_key text NOT NULL DEFAULT 'client_id',
    identifier     text NOT NULL CHECK (length(identifier) BETWEEN 1 AND 256),
    tier_name      text,
    rule_id        uuid REFERENCES rules (id) ON DELETE CASCADE, -- an override of a deleted rule means nothing
    params         jsonb,
    expires_at     timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    CHECK ((tier_name IS NULL) <> (rule_id IS NULL)),
    CHECK ((rule_id IS NULL) = (params IS NULL))
);
CREATE UNIQUE INDEX overrides_tier_move ON overrides (tenant_id, descriptor_key, identifier) WHERE rule_id IS NULL;
CREATE UNIQUE INDEX overrides_rule_params ON overrides (tenant_id, descriptor_key, identifier, rule_id) WHERE rule_id IS NOT NULL;

CREATE TABLE api_keys (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id    uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    kind         text NOT NULL CHECK (kind IN ('admin', 'check')),
    name         text NOT NULL DEFAULT '' CHECK (length(name) <= 100),
    prefix       text NOT NULL, -- shown in lists; the secret itself is never stored
    hash         bytea NOT NULL UNIQUE CHECK (length(hash) = 32),
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id);

-- The audit log outlives what it describes: no foreign keys.
CREATE TABLE audit_log (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id   uuid,
    actor       text NOT NULL,
    action      text NOT NULL CHECK (action IN ('create', 'update', 'delete', 'reorder', 'revoke')),
    resource    text NOT NULL,
    resource_id text NOT NULL DEFAULT '',
    old_value   jsonb,
    new_value   jsonb,
    version     bigint,
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_log_tenant_at ON audit_log (tenant_id, at DESC);

-- One row per committed config version, so a watcher can ask "what changed
-- since version v" and a lost notification delays but never loses a change.
CREATE TABLE config_versions (
    tenant_id  uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    version    bigint NOT NULL,
    changed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, version)
);
