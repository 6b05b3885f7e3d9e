//! herald-telemetry (being built)
