//! herald-scheduler (being built)
