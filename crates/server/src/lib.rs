//! herald-server (being built)
