//! herald-delivery (being built)
