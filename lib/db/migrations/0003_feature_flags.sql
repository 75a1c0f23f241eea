-- Feature flag values: a global row (tenant_scope_id = '') and per-tenant overrides.
CREATE TABLE feature_flag_values (
    flag_key text NOT NULL,
    tenant_scope_id text NOT NULL DEFAULT '',
    enabled boolean NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (flag_key, tenant_scope_id)
);
