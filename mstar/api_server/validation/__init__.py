"""What the API does with each request field: the field table, the rules types cannot say, and
fields no model declares."""
