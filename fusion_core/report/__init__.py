"""Reports: the rich console view and the versioned JSON document."""
