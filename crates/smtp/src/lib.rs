//! herald-smtp (being built)
