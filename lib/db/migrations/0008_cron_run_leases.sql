-- One row per cron job while a run of it is going: a second run (Vercel delivers crons at least
-- once; an operator may POST during the scheduled run) finds the lease and does nothing. A run
-- that died leaves a lease that lapses at lease_until.
CREATE TABLE cron_run_leases (
    job text PRIMARY KEY,
    holder uuid NOT NULL,
    trigger text NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    lease_until timestamptz NOT NULL
);
