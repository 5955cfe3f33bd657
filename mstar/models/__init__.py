"""Model implementations, weight loading and model resolution."""
