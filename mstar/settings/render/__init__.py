"""What is generated from the schema: the docs table, the JSON Schema, the .env template, and
the check that the committed copies are current."""
