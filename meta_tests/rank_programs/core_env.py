"""A rank program for launcher tests: every rank prints the NeuronCore and device-backend
autoload it was started with (set before its interpreter started), as JSON, and exits 0."""
import json
import os

print(json.dumps({"rank": int(os.environ["RANK"]), "cores": os.environ.get("NEURON_RT_VISIBLE_CORES"),
                  "autoload": os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD", "<unset>")}), flush=True)
