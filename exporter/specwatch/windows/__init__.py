"""Rolling windows over route snapshots (window: reset-aware mirrors and window views) and what a
window says (derive: alpha, acceptance length, K, per-position rates, batch, ITL quantiles). Pure."""
