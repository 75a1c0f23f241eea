"""HTTP plumbing shared by every function: typed errors, the app builder, gated routes."""
