"""Value types and validation: errors, jobs, options, stamps, argument checks (no I/O)."""
