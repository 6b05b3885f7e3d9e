//! herald-fanout (being built)
