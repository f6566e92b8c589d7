"""``python -m webhook_bot_gateway``: the ``gateway`` console script."""

import sys

from webhook_bot_gateway.gateway.cli import main

sys.exit(main())
