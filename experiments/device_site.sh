#!/bin/bash
# Build the Python packages a campaign needs on a GPU box that has torch but no package index and
# no Ray/MLflow/Optuna: a slim Ray (no Java jars, dashboard UI, RLlib/Serve/Tune/Train/Data/LLM
# libraries) plus MLflow-skinny, Optuna and the dependencies the image lacks, installed for
# CPython PYVER into one xz tarball (about 41 MB for 3.12, under the 64 MiB a device call carries).
#   experiments/device_site.sh 3.12 .devpk/site312.tar.xz      # here, with network
#   mkdir -p /tmp/site && tar -xJf .devpk/site312.tar.xz -C /tmp/site   # there
set -euo pipefail
PV=$1; OUT=$(realpath -m "$2"); WORK=$(mktemp -d)
PIP=(--only-binary=:all: --python-version "$PV" --implementation cp
     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
     --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
     --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64)
PKGS="ray==2.60.0 mlflow-skinny==3.17.2 optuna==5.0.0 sqlalchemy==2.1.9 alembic==1.20.1 mako==1.4.3
colorlog==6.12.0 cryptography==50.0.2 cffi==2.1.1 pycparser==3.12 databricks-sdk==0.162.0
google-auth==2.63.0 pyasn1==0.6.5 pyasn1-modules==0.4.2 cachetools==7.3.3 fastapi==0.165.0
starlette==1.10.0 uvicorn==0.54.0 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0
typing-inspection==0.4.5 gitpython==3.2.1 gitdb==4.0.12 smmap==5.0.3 importlib-metadata==9.1.0
jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
opentelemetry-api==1.45.2 opentelemetry-proto==1.45.2 opentelemetry-sdk==1.45.2
opentelemetry-semantic-conventions==0.66b2 python-dotenv==1.2.4 sqlparse==0.6.1"
python3 -m pip download -q --no-deps "${PIP[@]}" -d "$WORK/wheels" $PKGS
python3 -m pip install -q --no-deps --no-compile "${PIP[@]}" --target "$WORK/site" "$WORK"/wheels/*.whl
cd "$WORK/site"
rm -rf ray/jars ray/dashboard/client/build ray/rllib ray/serve ray/tune ray/train ray/llm ray/data bin
mkdir -p "$(dirname "$OUT")"
tar -cf - . | xz -T0 -6 > "$OUT"
rm -rf "$WORK"
ls -la "$OUT"
