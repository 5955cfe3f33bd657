# The two commands of the README. Both set up .venv themselves on first use.
.PHONY: serve test

serve:
	@scripts/setup.sh
	.venv/bin/mstar serve

test:
	@scripts/test.sh
