//! herald-spool (being built)
