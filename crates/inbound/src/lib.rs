//! herald-inbound (being built)
