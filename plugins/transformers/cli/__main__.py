"""`python -m sagespec.plugins.transformers.cli`: the `sagespec` command."""

import sys

from sagespec.plugins.transformers.cli.main import main

sys.exit(main())
