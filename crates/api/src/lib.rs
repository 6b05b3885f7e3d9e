//! herald-api (being built)
