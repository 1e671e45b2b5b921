"""Put the folder that holds vLLM (``TITO_AUDIT_VLLM_PATH``) after this environment's own packages.

Only tito-audit's vLLM processes have this folder on ``PYTHONPATH`` (the parser worker, the reference renderer and
the processes vLLM starts itself): Python imports ``sitecustomize`` once its site packages are on the path, so the
vLLM folder comes last and this environment's pinned packages win wherever both hold one.
"""

import os
import sys

_folder = os.environ.get("TITO_AUDIT_VLLM_PATH", "")
if _folder and _folder not in sys.path:
    sys.path.append(_folder)
