"""`python -m spark_export --store DIR --out DIR ...` (see spark_export.job)."""

import sys

from spark_export.job import main

sys.exit(main())
