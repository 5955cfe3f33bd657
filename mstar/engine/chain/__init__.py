"""Chained walks: several language-model nodes and a codec, one request walking them
(``speech_chain``)."""
