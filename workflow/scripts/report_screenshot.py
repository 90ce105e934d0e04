"""Glue: the first screen of results/report.html as the repository's report/screenshot.png (rule
report_screenshot; headless Chromium, see svbop.report.browser)."""

import logging

from svbop.logs import to_log_file
from svbop.report.browser import screenshot

to_log_file(snakemake.log[0])
width, height = snakemake.params.size
screenshot(snakemake.input.html, snakemake.output.png, width=width, height=height)
logging.info("%s at %d x %d -> %s", snakemake.input.html, width, height, snakemake.output.png)
