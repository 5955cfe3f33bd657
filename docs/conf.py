project = "mstar"
author = "the mstar team"
extensions = []
exclude_patterns = ["_build"]
html_theme = "alabaster"
