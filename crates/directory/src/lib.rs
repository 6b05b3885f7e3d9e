//! herald-directory (being built)
