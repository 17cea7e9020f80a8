#!/usr/bin/env bash
# Regenerates the Python modules of proto/tjobs/callback/v1/receiver.proto into tjobs/delivery/grpc_proto/
# (messages and the Receiver stub/servicer with grpcio-tools, typed .pyi beside them with mypy-protobuf).
# Run from anywhere after changing the .proto; commit the result. Needs the dev extra (grpcio-tools,
# mypy-protobuf) in .venv.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
out="$root/tjobs/delivery/grpc_proto"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# protoc-gen-mypy and protoc-gen-mypy_grpc are installed next to the venv's python
PATH="$(dirname "$python"):$PATH" "$python" -m grpc_tools.protoc \
    -I "$root/proto" \
    --python_out="$work" --mypy_out="$work" --grpc_python_out="$work" --mypy_grpc_out="$work" \
    "$root/proto/tjobs/callback/v1/receiver.proto"

# The descriptor keeps its published name (tjobs/callback/v1/receiver.proto); only the Python import
# of the messages from the stub moves to where the modules live in the package.
generated="$work/tjobs/callback/v1"
for name in receiver_pb2.py receiver_pb2.pyi receiver_pb2_grpc.py receiver_pb2_grpc.pyi; do
    sed -e 's/^from tjobs\.callback\.v1 import receiver_pb2/from tjobs.delivery.grpc_proto import receiver_pb2/' \
        -e 's/^import tjobs\.callback\.v1\.receiver_pb2$/import tjobs.delivery.grpc_proto.receiver_pb2/' \
        -e 's/tjobs\.callback\.v1\.receiver_pb2\./tjobs.delivery.grpc_proto.receiver_pb2./g' \
        "$generated/$name" >"$out/$name"
done
echo "generated into ${out#"$root"/}: receiver_pb2.py(i), receiver_pb2_grpc.py(i)"
