"""The neutral core every package shares: records, errors, the model spec, the sampling definition.

Nothing here imports envs, orchestrator or trainer; they import from here. Importing this
package is cheap (``sampling`` and the loaders in ``models`` import torch lazily or on use).
"""
