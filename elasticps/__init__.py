"""elasticps: elastic, fault-tolerant parameter-server training for PyTorch models.

The public surface lives here; everything else is internal and may change.
"""

from elasticps.config import Config, init, load_config
from elasticps.errors import ElasticPSError

__version__ = "0.1.0"

__all__ = ["Config", "ElasticPSError", "__version__", "init", "load_config"]
