//! herald-sim (being built)
