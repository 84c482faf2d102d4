"""Generated protobuf and gRPC code. Do not edit: run scripts/gen_protos.sh."""
